#include "ui/backend/TrainerBridge.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QMetaObject>
#include <QPointer>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>

#include "config/RunConfig.h"
#include "config/RunConfigYaml.h"
#include "events/EventBus.h"
#include "events/EventJson.h"
#include "ui/backend/ConfigDocument.h"
#include "ui/backend/FamilyBackend.h"
#include "ui/backend/TrainerRunner.h"

namespace strata::ui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QVector<MemoryView> memoryOf(const std::vector<events::DeviceMemory>& memory) {
  QVector<MemoryView> out;
  for (const auto& m : memory) out << MemoryView{qs(m.device), m.allocatedBytes, m.reservedBytes, m.capBytes};
  return out;
}

// A component a run streams in (events::LoadProgressEvent::what), in user words.
QString loadTitle(const std::string& what) {
  if (what == events::kLoadTransformer) return QObject::tr("the transformer");
  if (what == events::kLoadT5) return QObject::tr("the T5 text encoder");
  if (what == events::kLoadLanguageModel) return QObject::tr("the language model");
  if (what == events::kLoadFlux2TextEncoder) return QObject::tr("the FLUX.2 text encoder");
  return qs(what);
}

// A stage of an images run's cache (events::CacheProgressEvent::stage), in user words.
QString cacheTitle(const std::string& stage) {
  if (stage == "latents") return QObject::tr("the image latents");
  if (stage == "text") return QObject::tr("the caption embeddings");
  if (stage == "sample prompts") return QObject::tr("the sample prompts' embeddings");
  return qs(stage);
}

// Lets a stage's first and last cache progress through, and between them one per
// kCacheProgressIntervalMs: a folder of thousands of images encodes in as many batches.
class CacheThrottle {
 public:
  bool pass(const events::CacheProgressEvent& e) {
    const auto now = std::chrono::steady_clock::now();
    const bool due = e.stage != stage_ || e.done >= e.total ||
                     now - last_ >= std::chrono::milliseconds(TrainerBridge::kCacheProgressIntervalMs);
    if (!due) return false;
    stage_ = e.stage;
    last_ = now;
    return true;
  }

 private:
  std::string stage_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

// Audit issues go under the device they were found on.
PlacementView placementViewOf(const events::PlacementEvent& e) {
  PlacementView v;
  v.planned = false;
  v.reason = qs(e.reason);
  auto deviceIndex = [&v](const QString& label) {
    for (int i = 0; i < v.devices.size(); ++i)
      if (v.devices[i].label == label) return i;
    DeviceView d;
    d.label = label;
    d.name = label == "cpu" ? QObject::tr("host memory") : QString();
    v.devices << d;
    return int(v.devices.size() - 1);
  };
  for (const auto& b : e.blocks) {
    BlockView bv;
    bv.id = qs(b.id);
    bv.kind = blockKindFromString(qs(b.kind));
    // Measured by the placement from the live tensors, per block and attachment kind.
    bv.measured = true;
    bv.weightBytes = b.paramBytes;
    for (const auto& a : b.attachments) {
      if (a.kind == "lora_adapter") {
        bv.adapterBytes += a.bytes;
        bv.adapterCount += int(a.count);
      } else if (a.kind == "ema_shadow") {
        bv.emaBytes += a.bytes;
      } else if (a.kind == "optimizer_state") {
        bv.optimizerBytes += a.bytes;
      } else if (a.kind == "quant_scale") {
        bv.quantScaleBytes += a.bytes;
      } else if (a.kind == "fp8_transpose") {
        bv.keptTransposeBytes += a.bytes;
      } else {
        bv.otherAttachmentBytes += a.bytes;
      }
    }
    for (const auto& a : b.hostAttachments)
      if (a.kind == "optimizer_state") bv.hostOptimizerBytes += a.bytes;
    DeviceView& d = v.devices[deviceIndex(qs(b.device))];
    d.plannedBytes += b.paramBytes + b.attachmentBytes;
    d.hostBytes += b.hostBytes;
    d.blocks << bv;
  }
  for (const auto& m : e.memory) {
    DeviceView& d = v.devices[deviceIndex(qs(m.device))];
    d.allocatedBytes = m.allocatedBytes;
    d.reservedBytes = m.reservedBytes;
    d.capBytes = m.capBytes;
  }
  for (const auto& a : e.audit)
    v.devices[deviceIndex(qs(a.actual))].mismatches << MismatchView{qs(a.path), qs(a.expected), qs(a.actual)};
  return v;
}

// The steps read from the child, drained into the views on the GUI's timer.
struct TrainerBridge::Shared {
  std::mutex mutex;
  QVector<MetricPoint> pending;  // steps not yet drained
  QVector<MemoryView> memory;    // latest figures
  bool memoryDirty = false;
  qint64 step = 0, totalSteps = 0;
  double stepTimeMs = 0, etaSeconds = 0;
  double imagesPerSec = 0;
  int replicas = 1;  // ranks seen (highest rank + 1)
  bool progressDirty = false;
};

// What the bridge reads from the running child.
struct TrainerBridge::ChildRun {
  events::LineSplitter events{events::kMaxEventLineBytes};
  events::LineSplitter errors{kMaxStderrLineBytes};
  QStringList stderrTail;  // the last kStderrTailLines
  CacheThrottle cacheThrottle;
  bool ended = false;        // it said how the run ended (finished, stopped, failed, preflight)
  bool failureSaid = false;  // a failure was reported: later ones (other ranks') are warnings
  bool killedAfterStop = false;
  qint64 lastStep = 0;
  QString lastCheckpoint;
  static constexpr size_t kMaxStderrLineBytes = 4096;
};

TrainerBridge::TrainerBridge(QObject* parent) : QObject(parent), shared_(std::make_shared<Shared>()) {
  stopDeadline_ = new QTimer(this);
  stopDeadline_->setSingleShot(true);
  stopDeadline_->setInterval(kStopWaitMs);
  connect(stopDeadline_, &QTimer::timeout, this, [this] {
    if (!child_) return;
    run_->killedAfterStop = true;
    child_->kill();
  });
  qRegisterMetaType<strata::ui::MetricPoint>();
  qRegisterMetaType<QVector<strata::ui::MetricPoint>>();
  qRegisterMetaType<strata::ui::MemoryView>();
  qRegisterMetaType<QVector<strata::ui::MemoryView>>();
  qRegisterMetaType<strata::ui::PlacementView>();
  qRegisterMetaType<strata::ui::SampleInfo>();
  qRegisterMetaType<strata::ui::LoadProgressView>();
  qRegisterMetaType<strata::ui::CacheProgressView>();
  drainTimer_ = new QTimer(this);
  drainTimer_->setInterval(kDrainIntervalMs);
  connect(drainTimer_, &QTimer::timeout, this, &TrainerBridge::drain);
}

TrainerBridge::~TrainerBridge() {
  if (child_) {
    // Nothing may reach the views any more; the child keeps its checkpoint.
    child_->disconnect(this);
    if (child_->state() != QProcess::NotRunning) {
      if (!sendControl(events::controlToJson(events::ControlCommand::Stop))) child_->terminate();
      if (!child_->waitForFinished(kStopWaitMs)) {
        child_->kill();
        child_->waitForFinished(5000);
      }
    }
  }
  if (thread_) {
    thread_->wait();  // an export finishes its file
    delete thread_;
  }
}

QString TrainerBridge::findTrainer(QString* error) {
  const QString fromEnv = qEnvironmentVariable("STRATA_TRAIN_BIN");
  if (!fromEnv.isEmpty()) {
    const QFileInfo info(fromEnv);
    if (info.isFile() && info.isExecutable()) return info.absoluteFilePath();
    if (error) *error = tr("STRATA_TRAIN_BIN names %1, which is not an executable file.").arg(fromEnv);
    return QString();
  }
  const QString appDir = QCoreApplication::applicationDirPath();
  const QFileInfo beside(QDir(appDir).filePath("strata-train"));
  if (beside.isFile() && beside.isExecutable()) return beside.absoluteFilePath();
  const QString onPath = QStandardPaths::findExecutable("strata-train");
  if (!onPath.isEmpty()) return onPath;
  if (error)
    *error = tr("strata-train, which trains the runs, is neither beside the app (%1) nor on PATH. Install it "
                "with the app, or set STRATA_TRAIN_BIN to its path.")
                 .arg(appDir);
  return QString();
}

qint64 TrainerBridge::childProcessId() const {
  return child_ && child_->state() == QProcess::Running ? child_->processId() : 0;
}

void TrainerBridge::setState(State s) {
  if (state_ == s) return;
  state_ = s;
  emit stateChanged(s);
}

bool TrainerBridge::launch(std::function<void()> body, QString* error) {
  if (thread_ || child_) {
    if (error) *error = tr("A run or an export is already active.");
    return false;
  }
  thread_ = QThread::create(std::move(body));
  thread_->setObjectName("strata-export");
  connect(thread_, &QThread::finished, this, &TrainerBridge::onThreadDone);
  thread_->start();
  drainTimer_->start();
  return true;
}

void TrainerBridge::onThreadDone() {
  drain();
  drainTimer_->stop();
  thread_->deleteLater();
  thread_ = nullptr;
  setState(State::Idle);
}

// Turns one event decoded from the child into the bridge's signals (GUI thread).
struct BridgeAccess {
  static void dispatch(TrainerBridge* b, const events::Event& event) {
    using State = TrainerBridge::State;
    std::visit(
        [b](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, events::StartedEvent>) {
            b->runDir_ = qs(e.runDir);
            emit b->setupDescribed(qs(e.setup));
            emit b->started(qs(e.runDir), e.startStep, e.totalSteps, e.resumed);
          } else if constexpr (std::is_same_v<T, events::LoadProgressEvent>) {
            emit b->loadProgress(LoadProgressView{qs(e.what), loadTitle(e.what), e.done, e.total});
          } else if constexpr (std::is_same_v<T, events::CacheProgressEvent>) {
            emit b->cacheProgress(
                CacheProgressView{qs(e.stage), cacheTitle(e.stage), e.done, e.total, e.encoded, e.itemsPerSecond});
          } else if constexpr (std::is_same_v<T, events::PlacementEvent>) {
            PlacementView v = placementViewOf(e);
            v.parts = b->mapParts_;  // the run's family names its parts
            emit b->placementChanged(v);
          } else if constexpr (std::is_same_v<T, events::SampleEvent>) {
            SampleInfo info;
            info.path = qs(e.path);
            info.step = e.step;
            info.promptIndex = int(e.promptIndex);
            info.prompt = qs(e.prompt);
            emit b->sampleReady(info);
          } else if constexpr (std::is_same_v<T, events::CheckpointEvent>) {
            emit b->checkpointSaved(qs(e.path), e.step);
          } else if constexpr (std::is_same_v<T, events::ExportEvent>) {
            emit b->loraExported(qs(e.path), qs(e.format));
          } else if constexpr (std::is_same_v<T, events::WarningEvent>) {
            emit b->warning(qs(e.message));
          } else if constexpr (std::is_same_v<T, events::NoteEvent>) {
            emit b->note(qs(e.message));
          } else if constexpr (std::is_same_v<T, events::PreflightFailedEvent>) {
            QStringList problems;
            for (const auto& p : e.problems) problems << qs(p);
            b->run_->failureSaid = true;
            emit b->failed(QObject::tr("The run did not start:\n%1").arg(problems.join('\n')), 0, QString());
          } else if constexpr (std::is_same_v<T, events::PausedEvent>) {
            b->setState(State::Paused);
            emit b->paused(e.step);
          } else if constexpr (std::is_same_v<T, events::ResumedEvent>) {
            b->setState(State::Running);
            emit b->resumed(e.step);
          } else if constexpr (std::is_same_v<T, events::StoppedEvent>) {
            b->drain();
            emit b->stopped(e.step, qs(e.checkpoint));
          } else if constexpr (std::is_same_v<T, events::FinishedEvent>) {
            b->drain();
            QStringList exports;
            for (const auto& x : e.exports) exports << qs(x);
            emit b->finished(e.step, e.finalLoss, exports);
          } else if constexpr (std::is_same_v<T, events::FailedEvent>) {
            b->drain();
            // A data-parallel run's first failure is its cause (the launcher sends the rank
            // that died first); the others' that follow (a broken collective) are warnings.
            if (b->run_->failureSaid) {
              emit b->warning(qs(e.message));
            } else {
              b->run_->failureSaid = true;
              emit b->failed(qs(e.message), e.step, qs(e.lastGoodCheckpoint));
            }
          }
          // StepEvent never comes here: it goes through the buffer.
        },
        event);
  }
};

bool TrainerBridge::launchChild(const QStringList& arguments, const QString& runDir, const QVector<MapPartView>& parts,
                                QString* error) {
  if (thread_ || child_) {
    if (error) *error = tr("A run or an export is already active.");
    return false;
  }
  const QString program = findTrainer(error);
  if (program.isEmpty()) return false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->pending.clear();
    shared_->memoryDirty = shared_->progressDirty = false;
    shared_->replicas = 1;
    shared_->imagesPerSec = 0;
  }
  run_ = std::make_unique<ChildRun>();
  trainerProgram_ = program;
  child_ = new QProcess(this);
  child_->setProgram(program);
  child_->setArguments(arguments);
  child_->setProcessChannelMode(QProcess::SeparateChannels);
  connect(child_, &QProcess::readyReadStandardOutput, this, &TrainerBridge::readChildOutput);
  connect(child_, &QProcess::readyReadStandardError, this, &TrainerBridge::readChildErrors);
  connect(child_, &QProcess::finished, this, [this](int exitCode, QProcess::ExitStatus status) {
    onChildFinished(exitCode, status == QProcess::CrashExit);
  });
  connect(child_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) onChildFailedToStart();
  });
  runDir_ = runDir;
  mapParts_ = parts;
  setState(State::Running);  // before start(): a start that fails at once ends the run from inside it
  drainTimer_->start();
  child_->start();
  return true;
}

bool TrainerBridge::start(const ConfigDocument& config, const RunOverrides& overrides, QString* error) {
  if (isActive()) {
    if (error) *error = tr("A run or an export is already active.");
    return false;
  }
  // The child reads the run's config from a file of its own, written aside and renamed into place.
  auto dir = std::make_unique<QTemporaryDir>(QDir(QDir::tempPath()).filePath("strata-run-XXXXXX"));
  if (!dir->isValid()) {
    if (error) *error = tr("Cannot make a folder for the run's config: %1").arg(dir->errorString());
    return false;
  }
  const QString configPath = dir->filePath("config.yaml");
  try {
    config::saveRunConfig(config.runConfig(overrides), configPath.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = tr("Cannot write the run's config: %1").arg(QString::fromUtf8(e.what()));
    return false;
  }
  if (!launchChild({"run", configPath, "--events", "jsonl", "--control-stdin"}, QString(),
                   backend::mapPartsOf(config.config().model.arch), error))
    return false;
  if (child_) configDir_ = std::move(dir);  // removed when the child has ended (at once if it could not start)
  return true;
}

bool TrainerBridge::resume(const QString& runDir, QString* error) {
  if (!QDir(runDir).exists()) {
    if (error) *error = tr("%1 is not a folder.").arg(runDir);
    return false;
  }
  // The family the run folder's config names (none when it cannot be read: the map names blocks by id).
  ConfigDocument run;
  const QVector<MapPartView> parts =
      run.readRunFolderConfig(runDir) ? backend::mapPartsOf(run.config().model.arch) : QVector<MapPartView>{};
  return launchChild({"resume", runDir, "--events", "jsonl", "--control-stdin"}, runDir, parts, error);
}

void TrainerBridge::readChildOutput() {
  if (!child_) return;
  const QByteArray bytes = child_->readAllStandardOutput();
  for (const auto& line : run_->events.feed(std::string_view(bytes.constData(), size_t(bytes.size())))) {
    const QString where = tr("strata-train's events, line %1").arg(line.number);
    if (line.tooLong) {
      emit warning(tr("%1: longer than %2 bytes, ignored").arg(where).arg(qulonglong(events::kMaxEventLineBytes)));
      continue;
    }
    if (line.text.empty()) continue;
    // After a stop request the child has kStopWaitMs of silence, not in all: it may
    // finish a step's samples (several FLUX prompts) before it sees the stop.
    if (stopDeadline_->isActive()) stopDeadline_->start();
    events::Event event;
    int rank = 0;  // a line without one: a run of one process
    try {
      events::RankedEvent ranked = events::rankedFromJson(line.text, where.toStdString());
      event = std::move(ranked.event);
      rank = ranked.rank.value_or(0);
    } catch (const std::exception& e) {
      emit warning(QString::fromUtf8(e.what()));
      continue;
    }
    if (rank >= kMaxReplicas) {
      emit warning(
          tr("%1: rank %2 is past the %3 replicas the app shows; ignored").arg(where).arg(rank).arg(kMaxReplicas));
      continue;
    }
    if (rank > 0) {
      {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        shared_->replicas = std::max(shared_->replicas, rank + 1);
      }
      // Another replica: its map (placement and memory) and its failure; the run's course is rank 0's.
      if (const auto* p = std::get_if<events::PlacementEvent>(&event)) {
        PlacementView v = placementViewOf(*p);
        v.parts = mapParts_;
        emit replicaPlacementChanged(rank, v);
      } else if (const auto* s = std::get_if<events::StepEvent>(&event); s && !s->memory.empty()) {
        emit replicaMemoryUpdated(rank, memoryOf(s->memory));
      } else if (std::holds_alternative<events::FailedEvent>(event)) {
        run_->ended = true;
        BridgeAccess::dispatch(this, event);
      }
      if (!child_) return;
      continue;
    }
    if (const auto* c = std::get_if<events::CacheProgressEvent>(&event); c && !run_->cacheThrottle.pass(*c)) continue;
    if (const auto* s = std::get_if<events::StepEvent>(&event)) {
      run_->lastStep = s->step;
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->pending << MetricPoint{s->step, s->loss, s->lossSmoothed, s->lr};
      shared_->step = s->step;
      shared_->totalSteps = s->totalSteps;
      shared_->stepTimeMs = s->stepTimeMs;
      shared_->etaSeconds = s->etaSeconds;
      shared_->imagesPerSec = s->imagesPerSec;
      shared_->progressDirty = true;
      if (!s->memory.empty()) {
        shared_->memory = memoryOf(s->memory);
        shared_->memoryDirty = true;
      }
      continue;
    }
    if (const auto* c = std::get_if<events::CheckpointEvent>(&event)) run_->lastCheckpoint = qs(c->path);
    run_->ended = run_->ended || std::holds_alternative<events::FinishedEvent>(event) ||
                  std::holds_alternative<events::StoppedEvent>(event) ||
                  std::holds_alternative<events::FailedEvent>(event) ||
                  std::holds_alternative<events::PreflightFailedEvent>(event);
    BridgeAccess::dispatch(this, event);
    if (!child_) return;  // a view's slot ended the run meanwhile
  }
}

void TrainerBridge::readChildErrors() {
  if (!child_) return;
  const QByteArray bytes = child_->readAllStandardError();
  std::cerr.write(bytes.constData(), bytes.size());  // the app's log keeps the child's
  for (const auto& line : run_->errors.feed(std::string_view(bytes.constData(), size_t(bytes.size())))) {
    run_->stderrTail << (line.tooLong ? tr("(a line longer than %1 bytes)").arg(ChildRun::kMaxStderrLineBytes)
                                      : QString::fromUtf8(line.text.data(), int(line.text.size())));
    while (run_->stderrTail.size() > kStderrTailLines) run_->stderrTail.removeFirst();
  }
}

void TrainerBridge::onChildFinished(int exitCode, bool crashed) {
  readChildOutput();
  readChildErrors();
  for (const auto& line : run_->errors.finish())
    run_->stderrTail << QString::fromUtf8(line.text.data(), int(line.text.size()));
  while (run_->stderrTail.size() > kStderrTailLines) run_->stderrTail.removeFirst();
  if (!run_->ended) {
    // The child ended without a word on how: killed, crashed, or refused the config before training.
    QString how;
    if (run_->killedAfterStop)
      how = tr("did not stop within %1 s of the stop request and was killed").arg(kStopWaitMs / 1000);
    else if (crashed)  // Qt gives the signal's number as the exit code of a crash
      how = tr("was ended by signal %1 (%2)").arg(exitCode).arg(QString::fromLocal8Bit(strsignal(exitCode)));
    else
      how = tr("exited with code %1").arg(exitCode);
    QString message = tr("The training process (%1) %2; the app is unaffected.").arg(trainerProgram_, how);
    if (!run_->stderrTail.isEmpty()) message += tr("\nIts last messages:\n") + run_->stderrTail.join('\n');
    drain();
    emit failed(message, run_->lastStep, run_->lastCheckpoint);
  }
  endChild();
}

void TrainerBridge::onChildFailedToStart() {
  emit failed(tr("Cannot start %1: %2").arg(trainerProgram_, child_->errorString()), 0, QString());
  endChild();
}

void TrainerBridge::endChild() {
  stopDeadline_->stop();
  drain();
  drainTimer_->stop();
  child_->disconnect(this);
  child_->deleteLater();
  child_ = nullptr;
  run_.reset();
  configDir_.reset();
  setState(State::Idle);
}

bool TrainerBridge::exportLora(const QString& runDir, const QString& outDir, const QStringList& formats, qint64 step,
                               ExistingExport existing, QString* error) {
  std::vector<std::string> fmts;
  for (const QString& f : formats) fmts.push_back(f.toStdString());
  QPointer<TrainerBridge> self(this);
  const std::string dir = runDir.toStdString(), out = outDir.toStdString();
  const auto mode = existing == ExistingExport::Overwrite ? runner::ExistingExport::Overwrite
                    : existing == ExistingExport::NewName ? runner::ExistingExport::NewName
                                                          : runner::ExistingExport::Refuse;
  auto body = [self, dir, out, fmts, step, mode] {
    bool ok = true;
    QString message;
    QStringList files;
    try {
      std::vector<std::string> notes;
      for (const std::string& f : runner::exportLora(dir, out, fmts, step, mode, &notes)) files << qs(f);
      message = QObject::tr("%1 file(s) written to %2").arg(files.size()).arg(qs(out));
      for (const std::string& n : notes) message += "\n" + qs(n);
    } catch (const std::exception& e) {
      ok = false;
      message = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        self.data(),
        [self, ok, message, files] {
          if (self) emit self->exportFinished(ok, message, files);
        },
        Qt::QueuedConnection);
  };
  if (!launch(body, error)) return false;
  setState(State::Exporting);
  return true;
}

void TrainerBridge::drain() {
  QVector<MetricPoint> points;
  QVector<MemoryView> memory;
  bool memoryDirty = false, progressDirty = false;
  qint64 step = 0, total = 0;
  double stepMs = 0, eta = 0, imagesPerSec = 0;
  int replicas = 1;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    points.swap(shared_->pending);
    if ((memoryDirty = shared_->memoryDirty)) memory = shared_->memory;
    shared_->memoryDirty = false;
    progressDirty = shared_->progressDirty;
    shared_->progressDirty = false;
    step = shared_->step;
    total = shared_->totalSteps;
    stepMs = shared_->stepTimeMs;
    eta = shared_->etaSeconds;
    imagesPerSec = shared_->imagesPerSec;
    replicas = shared_->replicas;
  }
  if (!points.isEmpty()) emit metricsReady(points);
  if (progressDirty) emit throughputUpdated(imagesPerSec, replicas);  // before progress: the header shows both
  if (progressDirty) emit progress(step, total, stepMs, eta);
  if (memoryDirty) emit memoryUpdated(memory);
}

// One control line to the child (EventJson.h); false when it cannot be written.
bool TrainerBridge::sendControl(const std::string& line) {
  if (!child_ || child_->state() != QProcess::Running) return false;
  const QByteArray bytes = QByteArray::fromStdString(line + "\n");
  return child_->write(bytes) == bytes.size();
}

void TrainerBridge::stop() {
  if (!child_ || !(state_ == State::Running || state_ == State::Paused)) return;
  // The stop line; SIGTERM does the same (train/StopSignals.h) where stdin is not writable.
  if (!sendControl(events::controlToJson(events::ControlCommand::Stop))) child_->terminate();
  stopDeadline_->start();
  setState(State::Stopping);
}

void TrainerBridge::pause() { sendControl(events::controlToJson(events::ControlCommand::Pause)); }

void TrainerBridge::resumeRun() { sendControl(events::controlToJson(events::ControlCommand::Resume)); }

void TrainerBridge::sampleNow() { sendControl(events::controlToJson(events::ControlCommand::SampleNow)); }

void TrainerBridge::saveNow() { sendControl(events::controlToJson(events::ControlCommand::SaveNow)); }

}  // namespace strata::ui
