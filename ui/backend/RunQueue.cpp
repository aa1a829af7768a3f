#include "ui/backend/RunQueue.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QUuid>
#include <algorithm>
#include <exception>

#include "io/AtomicFile.h"
#include "io/FileBytes.h"

namespace strata::ui {

namespace {

const QVector<RunQueue::State> kStates = {RunQueue::State::Waiting, RunQueue::State::Running, RunQueue::State::Finished,
                                          RunQueue::State::Failed, RunQueue::State::Stopped};

bool isDone(RunQueue::State s) {
  return s == RunQueue::State::Finished || s == RunQueue::State::Failed || s == RunQueue::State::Stopped;
}

}  // namespace

QString RunQueue::stateName(State state) {
  switch (state) {
    case State::Waiting:
      return "waiting";
    case State::Running:
      return "running";
    case State::Finished:
      return "finished";
    case State::Failed:
      return "failed";
    case State::Stopped:
      return "stopped";
  }
  return QString();
}

RunQueue::RunQueue(const QString& filePath, QObject* parent) : QObject(parent), filePath_(filePath) { load(); }

void RunQueue::load() {
  if (!QFileInfo::exists(filePath_)) return;
  QString problem;
  QVector<Entry> loaded;
  try {
    // A regular file of at most 1 MB: a FIFO or a link to /dev/zero is refused, not read.
    const std::string bytes = io::readSmallFile(filePath_.toStdString(), io::kMaxSmallFileBytes, "run queue file");
    QJsonParseError err{};
    const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(bytes), &err);
    if (err.error != QJsonParseError::NoError) {
      problem = tr("not JSON at byte %1 (%2)").arg(err.offset).arg(err.errorString());
    } else if (!doc.isObject() || !doc.object().value("entries").isArray()) {
      problem = tr("no \"entries\" list");
    } else if (doc.object().value("version").toInt() != kFormatVersion) {
      problem = tr("version %1, this Strata reads version %2")
                    .arg(doc.object().value("version").toVariant().toString())
                    .arg(kFormatVersion);
    } else {
      const QJsonArray list = doc.object().value("entries").toArray();
      for (int i = 0; i < list.size() && problem.isEmpty(); ++i) {
        const QJsonObject o = list[i].toObject();
        Entry e;
        e.id = o.value("id").toString();
        e.name = o.value("name").toString();
        e.source = o.value("source").toString();
        e.yaml = o.value("yaml").toString();
        e.message = o.value("message").toString();
        e.runDir = o.value("run_dir").toString();
        e.added = QDateTime::fromString(o.value("added").toString(), Qt::ISODate);
        const QString state = o.value("state").toString();
        bool known = false;
        for (State s : kStates)
          if (stateName(s) == state) {
            e.state = s;
            known = true;
          }
        if (e.id.isEmpty() || e.yaml.isEmpty() || !known)
          problem = tr("entry %1: needs an id, a yaml text and a known state (got state \"%2\")").arg(i + 1).arg(state);
        // The app closed while it trained: the trainer saved a checkpoint and stopped.
        if (e.state == State::Running) {
          e.state = State::Stopped;
          e.message = tr("the app closed during this run; resume it from its run folder");
        }
        loaded << e;
      }
    }
  } catch (const std::exception& e) {
    problem = QString::fromUtf8(e.what());
  }
  if (problem.isEmpty()) {
    entries_ = loaded;
    return;
  }
  // Kept aside, not overwritten by the next save: the user can look at it.
  const QString aside = filePath_ + ".bad";
  QFile::remove(aside);
  QFile::rename(filePath_, aside);
  loadProblem_ = tr("The run queue %1 could not be read (%2); it is kept as %3 and the queue starts empty.")
                     .arg(filePath_, problem, aside);
}

void RunQueue::save() {
  QJsonArray list;
  for (const Entry& e : entries_)
    list.append(QJsonObject{{"id", e.id},
                            {"name", e.name},
                            {"source", e.source},
                            {"yaml", e.yaml},
                            {"state", stateName(e.state)},
                            {"message", e.message},
                            {"run_dir", e.runDir},
                            {"added", e.added.toString(Qt::ISODate)}});
  const QJsonObject root{{"version", kFormatVersion}, {"entries", list}};
  try {
    QDir().mkpath(QFileInfo(filePath_).absolutePath());
    io::writeFileAtomic(filePath_.toStdString(), QJsonDocument(root).toJson(QJsonDocument::Indented).toStdString());
  } catch (const std::exception& e) {
    emit saveFailed(QString::fromUtf8(e.what()));
  }
}

int RunQueue::indexOf(const QString& id) const {
  for (int i = 0; i < entries_.size(); ++i)
    if (entries_[i].id == id) return i;
  return -1;
}

const RunQueue::Entry* RunQueue::entry(const QString& id) const {
  const int i = indexOf(id);
  return i < 0 ? nullptr : &entries_[i];
}

int RunQueue::nextWaiting() const {
  for (int i = 0; i < entries_.size(); ++i)
    if (entries_[i].state == State::Waiting) return i;
  return -1;
}

QString RunQueue::add(const QString& name, const QString& source, const QString& yaml) {
  Entry e;
  e.id = QUuid::createUuid().toString(QUuid::WithoutBraces);
  e.name = name;
  e.source = source;
  e.yaml = yaml;
  e.added = QDateTime::currentDateTime();
  entries_ << e;
  save();
  emit changed();
  return e.id;
}

bool RunQueue::remove(const QString& id) {
  const int i = indexOf(id);
  if (i < 0 || entries_[i].state == State::Running) return false;
  entries_.remove(i);
  save();
  emit changed();
  return true;
}

bool RunQueue::move(const QString& id, int by) {
  const int i = indexOf(id);
  const int j = i + by;
  if (i < 0 || j < 0 || j >= entries_.size() || entries_[i].state == State::Running) return false;
  entries_.move(i, j);
  save();
  emit changed();
  return true;
}

int RunQueue::clearDone() {
  const int before = entries_.size();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [](const Entry& e) { return isDone(e.state); }),
                 entries_.end());
  const int removed = before - entries_.size();
  if (removed) {
    save();
    emit changed();
  }
  return removed;
}

void RunQueue::setState(const QString& id, State state, const QString& message, const QString& runDir) {
  const int i = indexOf(id);
  if (i < 0) return;
  entries_[i].state = state;
  entries_[i].message = message;
  if (!runDir.isEmpty()) entries_[i].runDir = runDir;
  save();
  emit changed();
}

bool RunQueue::requeue(const QString& id) {
  const int i = indexOf(id);
  if (i < 0 || (entries_[i].state != State::Failed && entries_[i].state != State::Stopped)) return false;
  setState(id, State::Waiting);
  return true;
}

}  // namespace strata::ui
