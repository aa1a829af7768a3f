#pragma once
// The run queue as the Run view shows it: one row per queued config (name, state,
// what happened, its run folder), with Remove, Up, Down, Run again and Clear
// done, and the switch that runs the queue. The window does the running.
#include <QWidget>

class QLabel;
class QPushButton;
class QTreeWidget;

namespace strata::ui {

class RunQueue;

class RunQueuePanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunQueuePanel(RunQueue* queue, QWidget* parent = nullptr);

  // Whether the queue is running (the switch's state); does not emit.
  void setRunning(bool running);
  bool isRunning() const { return running_; }
  QString selectedId() const;
  void select(const QString& id);
  QTreeWidget* list() const { return list_; }

 signals:
  void runToggled(bool run);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();
  void updateButtons();

  RunQueue* queue_ = nullptr;
  bool running_ = false;
  QLabel* summary_ = nullptr;
  QTreeWidget* list_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* remove_ = nullptr;
  QPushButton* up_ = nullptr;
  QPushButton* down_ = nullptr;
  QPushButton* again_ = nullptr;
  QPushButton* clearDone_ = nullptr;
};

}  // namespace strata::ui
