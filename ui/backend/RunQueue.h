#pragma once
// The run queue: configs that train one after another (the window starts the next
// one when the trainer is idle; a failed run does not stop the ones after it).
// Each entry keeps the config's YAML as it was when queued, so later edits of the
// file do not change a waiting run. The queue is a JSON file (the app's data
// folder), rewritten atomically (core/io/AtomicFile) after every change and read
// back at start; a run that was training when the app closed comes back as
// stopped, with its run folder to resume.
#include <QDateTime>
#include <QObject>
#include <QString>
#include <QVector>

namespace strata::ui {

class RunQueue : public QObject {
  Q_OBJECT
 public:
  enum class State { Waiting, Running, Finished, Failed, Stopped };
  struct Entry {
    QString id;
    QString name;    // job.name
    QString source;  // the config file it came from, or "untitled"
    QString yaml;    // the config as queued
    State state = State::Waiting;
    QString message;  // "final loss 0.41", the failure, ...
    QString runDir;
    QDateTime added;
  };
  static constexpr int kFormatVersion = 1;

  // Reads `filePath` when it exists. A file that cannot be read is moved aside to
  // FILE.bad and the queue starts empty; loadProblem() says so.
  explicit RunQueue(const QString& filePath, QObject* parent = nullptr);

  QString filePath() const { return filePath_; }
  QString loadProblem() const { return loadProblem_; }
  const QVector<Entry>& entries() const { return entries_; }
  int indexOf(const QString& id) const;
  const Entry* entry(const QString& id) const;
  // The first waiting entry's index, -1 when none.
  int nextWaiting() const;

  QString add(const QString& name, const QString& source, const QString& yaml);
  bool remove(const QString& id);        // false for a running entry
  bool move(const QString& id, int by);  // up (-1) or down (+1); false for a running entry or at an end
  int clearDone();                       // removes finished, failed and stopped entries
  void setState(const QString& id, State state, const QString& message = QString(), const QString& runDir = QString());
  bool requeue(const QString& id);  // a failed or stopped entry waits again

  static QString stateName(State state);

 signals:
  void changed();
  void saveFailed(const QString& message);

 private:
  void load();
  void save();

  QString filePath_;
  QString loadProblem_;
  QVector<Entry> entries_;
};

}  // namespace strata::ui
