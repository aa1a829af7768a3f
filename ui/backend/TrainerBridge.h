#pragma once
// The one bridge between the trainer and the GUI thread (docs/design.md §1,
// docs/app.md "The training process"). Every run is a `strata-train run|resume
// --events jsonl --control-stdin` child process, so a CUDA fault or a crash ends
// the child, not the window, and each run starts with a clean CUDA state. The
// child's JSON-lines events are decoded (core/events/EventJson.h) into plain view
// values: steps go into a buffer the bridge drains on a GUI-thread timer (one
// batch per tick), every other event becomes one signal. Stop, pause, sample and
// save are control lines on the child's stdin. A child that ends without saying
// how (killed, crashed) is reported as a failed run with its last stderr lines.
// Exports run in-process on a QThread. Nothing here blocks the GUI thread on
// training work. No LibTorch type crosses this header.
#include <QObject>
#include <QStringList>
#include <QVector>
#include <functional>
#include <memory>
#include <string>

#include "ui/backend/ViewModel.h"

class QProcess;
class QTemporaryDir;
class QThread;
class QTimer;

namespace strata::config {
struct RunConfig;
}
namespace strata::events {
struct PlacementEvent;
}

namespace strata::ui {

class ConfigDocument;
struct RunOverrides;

// The trainer's placement report as the GPU map's view: blocks grouped by device
// in the order devices first appear, each with the figures the run measured.
PlacementView placementViewOf(const events::PlacementEvent& e);

class TrainerBridge : public QObject {
  Q_OBJECT
 public:
  enum class State { Idle, Running, Paused, Stopping, Exporting };
  Q_ENUM(State)
  static constexpr int kDrainIntervalMs = 150;
  // Cache progress comes once per encoded batch: at most one per this interval
  // reaches the GUI per stage, and always the first and the last.
  static constexpr int kCacheProgressIntervalMs = 150;
  // How long a stopping child may stay silent (no event line) before it is killed; each
  // event it sends restarts the wait (the close of the window waits this long at most).
  static constexpr int kStopWaitMs = 120000;
  // The most replicas a run's maps show (strata-train --nproc takes up to 1024); a
  // line of a higher rank is a warning.
  static constexpr int kMaxReplicas = 1024;
  // The child's last stderr lines a failure report quotes.
  static constexpr int kStderrTailLines = 12;

  explicit TrainerBridge(QObject* parent = nullptr);
  ~TrainerBridge() override;  // stops a running child (checkpoint, bounded wait) and waits for an export

  // The strata-train a run starts: $STRATA_TRAIN_BIN when set, else the one beside
  // the app's binary, else the first on PATH. Empty with `error` when none is found.
  static QString findTrainer(QString* error = nullptr);

  // Starts a new run of `config`'s config (copied, with `overrides`). False with
  // `error` when a run is active. The live map's placements carry the words of its family.
  bool start(const ConfigDocument& config, const RunOverrides& overrides, QString* error = nullptr);
  // Resumes the run in `runDir` from its last checkpoint (its family read from the run's config.yaml).
  bool resume(const QString& runDir, QString* error = nullptr);
  // What an export does with a file of the same name that is there.
  enum class ExistingExport { Refuse, Overwrite, NewName };
  // Writes the LoRA of `runDir`'s checkpoint of `step` (< 0: the last intact one)
  // in `formats` ("diffusers", "kohya", "comfy", "peft") into `outDir`, named with
  // the step, on a worker thread; exportFinished reports (with what was renamed).
  bool exportLora(const QString& runDir, const QString& outDir, const QStringList& formats, qint64 step = -1,
                  ExistingExport existing = ExistingExport::Refuse, QString* error = nullptr);

  State state() const { return state_; }
  bool isActive() const { return state_ != State::Idle; }
  QString runDir() const { return runDir_; }
  // The strata-train the current (or last) run started, and its process id (0 when none runs).
  QString trainerProgram() const { return trainerProgram_; }
  qint64 childProcessId() const;

 public slots:
  void stop();  // checkpoint kept; `stopped` follows
  void pause();
  void resumeRun();
  void sampleNow();
  void saveNow();

 signals:
  void stateChanged(strata::ui::TrainerBridge::State state);
  // Before `started`: a component streamed in block by block ("transformer", "T5"),
  // `done` of `total` units (blocks, then the rest of it). One per block: a few dozen a run.
  void loadProgress(const strata::ui::LoadProgressView& progress);
  // Before `started`: an images run's cache fills ("latents", "text", "sample prompts"):
  // `done` of `total` items ready, `encoded` of them encoded now (0: all from the cache).
  void cacheProgress(const strata::ui::CacheProgressView& progress);
  // Right before `started`: how the base is held and the step runs, in one line
  // ("base bf16, quantized int8; LoRA float32; attention: flash; eager steps; ...").
  void setupDescribed(const QString& setup);
  void started(const QString& runDir, qint64 startStep, qint64 totalSteps, bool resumed);
  void metricsReady(const QVector<strata::ui::MetricPoint>& points);  // one batch per tick
  void progress(qint64 step, qint64 totalSteps, double stepTimeMs, double etaSeconds);
  void memoryUpdated(const QVector<strata::ui::MemoryView>& memory);
  void placementChanged(const strata::ui::PlacementView& placement);
  // With each progress: images per second over all ranks (rank 0's figure counts the
  // world), and how many replicas sent events so far (1 for a run of one process).
  void throughputUpdated(double imagesPerSec, int replicas);
  // A data-parallel run (model.replicas, docs/data-parallel.md): rank `rank` (1 and
  // up) placed its replica, and its cards' memory (at most once a second). Rank 0's
  // come as placementChanged and memoryUpdated.
  void replicaPlacementChanged(int rank, const strata::ui::PlacementView& placement);
  void replicaMemoryUpdated(int rank, const QVector<strata::ui::MemoryView>& memory);
  void sampleReady(const strata::ui::SampleInfo& sample);
  void checkpointSaved(const QString& path, qint64 step);
  void loraExported(const QString& path, const QString& format);
  void warning(const QString& message);
  // What the run chose once (events::NoteEvent), for the status bar.
  void note(const QString& message);
  void paused(qint64 step);
  void resumed(qint64 step);
  void stopped(qint64 step, const QString& checkpoint);
  void finished(qint64 step, double finalLoss, const QStringList& exports);
  // A run that could not start (preflight) or failed; never an exception.
  void failed(const QString& message, qint64 step, const QString& lastCheckpoint);
  void exportFinished(bool ok, const QString& message, const QStringList& files);

 private:
  struct Shared;    // the step buffer the drain timer empties
  struct ChildRun;  // the running child's decoder state
  friend struct BridgeAccess;
  bool launchChild(const QStringList& arguments, const QString& runDir, const QVector<MapPartView>& parts,
                   QString* error);
  bool launch(std::function<void()> body, QString* error);
  void drain();
  void setState(State s);
  void onThreadDone();
  bool sendControl(const std::string& line);
  void readChildOutput();
  void readChildErrors();
  void onChildFinished(int exitCode, bool crashed);
  void onChildFailedToStart();
  void endChild();

  std::shared_ptr<Shared> shared_;
  QThread* thread_ = nullptr;  // an export
  QProcess* child_ = nullptr;  // a run
  std::unique_ptr<ChildRun> run_;
  std::unique_ptr<QTemporaryDir> configDir_;  // the config file the child reads
  QTimer* stopDeadline_ = nullptr;
  QString trainerProgram_;
  QTimer* drainTimer_ = nullptr;
  State state_ = State::Idle;
  QString runDir_;
  QVector<MapPartView> mapParts_;  // the running family's words for the map
};

}  // namespace strata::ui

Q_DECLARE_METATYPE(strata::ui::MemoryView)
