#include "ui/backend/TrainerBridge.h"

#include <QDir>
#include <QMetaObject>
#include <QPointer>
#include <QThread>
#include <QTimer>
#include <chrono>
#include <mutex>
#include <string>

#include "config/RunConfig.h"
#include "events/EventBus.h"
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

// What the training thread and the GUI thread share. Held by shared_ptr so a
// late event after the bridge is gone touches nothing freed.
struct TrainerBridge::Shared {
  std::mutex mutex;
  QVector<MetricPoint> pending;  // steps not yet drained
  QVector<MemoryView> memory;    // latest figures
  bool memoryDirty = false;
  qint64 step = 0, totalSteps = 0;
  double stepTimeMs = 0, etaSeconds = 0;
  bool progressDirty = false;
  runner::Control* control = nullptr;  // valid while the trainer runs (guarded by mutex)
};

TrainerBridge::TrainerBridge(QObject* parent) : QObject(parent), shared_(std::make_shared<Shared>()) {
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
  if (thread_) {
    stop();
    thread_->wait();  // the trainer saves its checkpoint and returns
    delete thread_;
  }
}

void TrainerBridge::setState(State s) {
  if (state_ == s) return;
  state_ = s;
  emit stateChanged(s);
}

bool TrainerBridge::launch(std::function<void()> body, QString* error) {
  if (thread_) {
    if (error) *error = tr("A run or an export is already active.");
    return false;
  }
  thread_ = QThread::create(std::move(body));
  thread_->setObjectName("strata-trainer");
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

// Turns one queued core event into the bridge's signals (GUI thread).
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
          } else if constexpr (std::is_same_v<T, events::PreflightFailedEvent>) {
            QStringList problems;
            for (const auto& p : e.problems) problems << qs(p);
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
            emit b->failed(qs(e.message), e.step, qs(e.lastGoodCheckpoint));
          }
          // StepEvent never comes here: it goes through the buffer.
        },
        event);
  }
};

bool TrainerBridge::launchRun(bool resume, std::shared_ptr<const config::RunConfig> cfg, const QString& runDir,
                              const QVector<MapPartView>& parts, QString* error) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->pending.clear();
    shared_->memoryDirty = shared_->progressDirty = false;
  }
  QPointer<TrainerBridge> self(this);
  std::shared_ptr<Shared> shared = shared_;
  const std::string dir = runDir.toStdString();
  auto body = [self, shared, cfg, dir, resume] {
    events::EventBus bus;
    CacheThrottle cacheThrottle;  // the training thread's own
    // Runs on the training thread. Steps go to the buffer the GUI drains on its
    // timer; cache progress is thinned out (CacheThrottle); every other event is
    // queued to the GUI thread as one call, in order.
    events::Subscription sub = bus.subscribe([self, shared, &cacheThrottle](const events::Event& e) {
      if (const auto* c = std::get_if<events::CacheProgressEvent>(&e); c && !cacheThrottle.pass(*c)) return;
      if (const auto* s = std::get_if<events::StepEvent>(&e)) {
        std::lock_guard<std::mutex> lock(shared->mutex);
        shared->pending << MetricPoint{s->step, s->loss, s->lossSmoothed, s->lr};
        shared->step = s->step;
        shared->totalSteps = s->totalSteps;
        shared->stepTimeMs = s->stepTimeMs;
        shared->etaSeconds = s->etaSeconds;
        shared->progressDirty = true;
        if (!s->memory.empty()) {
          shared->memory = memoryOf(s->memory);
          shared->memoryDirty = true;
        }
        return;
      }
      QMetaObject::invokeMethod(
          self.data(),
          [self, e] {
            if (self) BridgeAccess::dispatch(self.data(), e);
          },
          Qt::QueuedConnection);
    });
    const runner::ControlSink sink = [shared](runner::Control* c) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->control = c;
    };
    if (resume)
      runner::runResume(dir, bus, sink);
    else
      runner::runNew(*cfg, bus, sink);
  };
  if (!launch(body, error)) return false;
  runDir_ = runDir;
  mapParts_ = parts;
  setState(State::Running);
  return true;
}

bool TrainerBridge::start(const ConfigDocument& config, const RunOverrides& overrides, QString* error) {
  return launchRun(false, std::make_shared<const config::RunConfig>(config.runConfig(overrides)), QString(),
                   backend::mapPartsOf(config.config().model.arch), error);
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
  return launchRun(true, nullptr, runDir, parts, error);
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
  double stepMs = 0, eta = 0;
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
  }
  if (!points.isEmpty()) emit metricsReady(points);
  if (progressDirty) emit progress(step, total, stepMs, eta);
  if (memoryDirty) emit memoryUpdated(memory);
}

void TrainerBridge::stop() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (!shared_->control) return;
  shared_->control->stop();
  if (state_ == State::Running || state_ == State::Paused) {
    state_ = State::Stopping;
    QMetaObject::invokeMethod(
        this, [this] { emit stateChanged(state_); }, Qt::QueuedConnection);
  }
}

void TrainerBridge::pause() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->control) shared_->control->pause(true);
}

void TrainerBridge::resumeRun() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->control) shared_->control->pause(false);
}

void TrainerBridge::sampleNow() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->control) shared_->control->sampleNow();
}

void TrainerBridge::saveNow() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->control) shared_->control->saveNow();
}

}  // namespace strata::ui
