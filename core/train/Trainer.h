#pragma once
// The training loop on its own thread-safe control surface. One Trainer is one
// run: construct it with a config (new run) or with resumeFrom (a run folder),
// call run() on the thread that is to own the training state (the GUI's worker
// QThread, the CLI's main thread), or start()/wait() to let it make one. It
// reports only through the EventBus it is given; control requests (stop,
// pause, sample now, save now, export now) are atomics read at every step, so
// they are safe from any thread, including a signal handler (requestStop).
//
// Order of a run (docs/design.md §2), one function each: preflight (validation and plan
// through train::prepareRun, a plan that does not fit refused, run folder, datasets), build and place (model,
// placement, LoRA, optimizer and EMA after placement), restore (a resumed run's
// tensors and counters, then the audit); any problem so far ends the run with
// the full list. Then the loop (steps, samples, checkpoints) and the finish (the
// export); at the end everything the run allocated is released (CUDA cache emptied).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/Error.h"
#include "common/Version.h"
#include "config/RunConfig.h"
#include "device/DeviceSelection.h"
#include "events/EventBus.h"

namespace strata::train {

class PhaseTimer;       // train/PhaseTimer.h
class RunSink;          // train/RunSink.h
class GradientReducer;  // train/GradientReducer.h
class Collective;       // train/Collective.h

enum class RunOutcome { Finished, Stopped, Failed, PreflightFailed };
const char* toString(RunOutcome outcome);

// The CLI's exit codes (strata-train run/resume).
constexpr int kExitOk = 0;             // finished
constexpr int kExitFailed = 1;         // failed during training (NaN loss, I/O, out of memory, ...)
constexpr int kExitBadInput = 2;       // bad command line, config or preflight problem
constexpr int kExitInterrupted = 130;  // stopped by Ctrl-C / stop(): checkpoint kept
int exitCodeOf(RunOutcome outcome);

struct TrainerOptions {
  // Run folder; empty = <job.training_folder>/<job.name>.
  std::filesystem::path runDir;
  // Continue from the run folder's latest checkpoint (same curve).
  bool resume = false;
  // Stop after this optimizer step (checkpoint kept, outcome Stopped) as if
  // stop() had been called then; 0 = run to train.steps. For tests and the CLI's
  // --stop-after.
  int64_t stopAfterStep = 0;
  std::string softwareVersion = kVersion;
  // Send the config validator's warnings as WarningEvents (the CLI prints them
  // itself, with their YAML lines, and turns this off).
  bool reportConfigWarnings = true;
  // The config's YAML as run; empty = written from the config.
  std::string configYaml;
  // When set, every step's phases (data, forward, backward, clip, optimizer, EMA,
  // report) are timed into it with device waits between them (strata-train bench --phases).
  std::shared_ptr<PhaseTimer> phaseTimer;
  // The devices preflight validates and plans on; empty = this machine's. Simulated
  // ones (`strata-train run --devices 1x16GB`, tests) stop the run after the plan
  // check, as a preflight problem either way: nothing is loaded or trained on
  // devices that are not there.
  std::optional<device::Inventory> devices;
  // No checkpoint (periodic, final, on a stop or on request) and no LoRA export, and
  // no checkpoints/ or exports/ folder: for a run whose folder is scratch
  // (strata-train bench), where a write would only cost time and could fail a
  // measurement that is done. A stop then ends as Stopped with no checkpoint.
  bool skipSaves = false;
  // The run folder's one writer, made once the folder is locked (its final path);
  // empty = a RunSink of that folder. For tests that watch the writes.
  std::function<std::shared_ptr<RunSink>(const std::filesystem::path& runDir, events::EventBus& bus)> makeSink;
  // The reduce point of every optimizer step; null = the empty collective of one
  // process (LocalGradients).
  std::shared_ptr<GradientReducer> reducer;
  // The ranks of a data-parallel run (dist/, docs/data-parallel.md); null = one
  // process, whose path is untouched by it. With it, `reducer` averages over the
  // ranks, rank 0 alone writes the run folder (the others get a SilentSink) and
  // decides stop, pause, samples and saves, and each rank draws its own share of
  // every global batch.
  std::shared_ptr<Collective> collective;
};

class Trainer {
 public:
  Trainer(config::RunConfig cfg, events::EventBus& bus, TrainerOptions options = {});
  // Reads <runDir>/config.yaml and continues from its latest checkpoint. Throws
  // IoError / ConfigError when the folder is not a run folder.
  static std::unique_ptr<Trainer> resumeFrom(const std::filesystem::path& runDir, events::EventBus& bus,
                                             TrainerOptions options = {});
  ~Trainer();  // stops and joins a thread started by start()
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs the whole run on the calling thread; never throws (a failure is a
  // FailedEvent and the outcome). Call once.
  RunOutcome run();
  // run() on a thread of its own; wait() joins it and returns the outcome.
  void start();
  RunOutcome wait();

  // ---- thread-safe requests --------------------------------------------
  void requestStop();           // checkpoint, then Stopped (async-signal-safe)
  void setPaused(bool paused);  // holds between steps
  void requestSample();         // samples after the current step
  void requestSave();           // checkpoint after the current step
  void requestExport();         // LoRA export after the current step

  bool running() const { return running_.load(); }
  bool paused() const { return paused_.load(); }
  int64_t currentStep() const { return step_.load(); }  // optimizer steps done
  const std::filesystem::path& runDir() const { return runDir_; }
  const config::RunConfig& config() const { return cfg_; }

  struct State;  // the training state (model, placement, optimizer, ...), training thread only

 private:
  RunOutcome runImpl();
  // The stages of a run, in order. The first three add what stops the run to
  // `problems` (the next runs only when there is none); nothing is written to
  // the run folder before they all pass.
  void preflight(State& st, std::vector<std::string>& problems);      // validation, plan, run folder, data
  void buildAndPlace(State& st, std::vector<std::string>& problems);  // model, placement, LoRA, optimizer, EMA
  void restore(State& st, std::vector<std::string>& problems);        // a resumed run's state; the audit
  RunOutcome loop(State& st);                                         // the steps, samples, checkpoints
  void auditAttachmentsMadeByTheFirstStep(State& st, int64_t step);   // what the first optimizer step made
  RunOutcome finish(State& st);                                       // the final export

  // Pieces of the loop. One optimizer step is forwardBackward over the micro-batches,
  // the reduce point (st.reducer, once) and optimizerStep. `queued` is called once the
  // forward and backward are queued, before the optimizer and before the host waits
  // for any of it: the last step's report is read there, while the card runs this
  // one, and a non-finite last step stops the run before this one changes a weight.
  struct StepReport;
  void trainStep(State& st, StepReport& report, const std::function<void()>& queued);
  struct MicroBatches;
  MicroBatches forwardBackward(State& st, const std::vector<at::Tensor>& params, int64_t step);
  void optimizerStep(State& st, const std::vector<at::Tensor>& params, MicroBatches& done, StepReport& report);
  // Reads a step's queued values (waiting for their copy only), stops the run on a
  // non-finite loss or gradient norm (or a collective's failure), and tells the step
  // (reportStep): its time ends at `nextStarted`, the next step's turn, or, without
  // one, once its values are read.
  void settleReport(State& st, StepReport& report, std::optional<std::chrono::steady_clock::time_point> nextStarted);
  void samples(State& st, int64_t step);  // every sample.prompts entry, through st.sink
  // train.cuda_graph: st.graph where this run uses one, else why not (decideStepGraph).
  void startStepGraph(State& st);
  // A copy of the micro-batch's loss with its gradients added by the step's CUDA graph
  // (recorded at a step's first micro-batch after the eager steps it needs), or
  // undefined: run it eagerly.
  at::Tensor graphedMicroStep(State& st, const std::vector<at::Tensor>& batch, const std::vector<at::Tensor>& params,
                              int64_t step, int64_t microBatch);
  void reportStep(State& st, const StepReport& report, double ms);
  bool checkpoint(State& st, int64_t step, bool manual = false);
  std::vector<std::string> exportLora(State& st, int64_t step, bool final);
  void waitWhilePaused();
  // A data-parallel run's stop, pause, sample, save and export of the step after
  // `step`, agreed by all ranks (holds while rank 0 is paused).
  struct StepDecisions {
    // The agreed stop: a data-parallel rank acts on this, never on its own flag read
    // after the agreement (a signal landing in between would stop that rank alone).
    bool stop = false;
    bool sample = false;
    bool save = false;
    bool exportNow = false;
    bool paused = false;  // rank 0 was paused: the agreement's time is not the step's
  };
  StepDecisions agreeOnDecisions(State& st, int64_t step);

  config::RunConfig cfg_;
  events::EventBus& bus_;
  TrainerOptions options_;
  std::filesystem::path runDir_;

  std::atomic<bool> stopRequested_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> sampleRequested_{false};
  std::atomic<bool> saveRequested_{false};
  std::atomic<bool> exportRequested_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> ran_{false};
  std::atomic<int64_t> step_{0};
  std::mutex pauseMutex_;
  std::condition_variable pauseCv_;

  std::thread thread_;
  RunOutcome threadOutcome_ = RunOutcome::Failed;
};

// What `strata-train export` and the app's Export write. Files are named with the
// checkpoint's step (<job>_step<N>_<format>.safetensors, a Llama run's
// <job>_step<N>_peft/), as the trainer names its save.export_every files.
enum class ExistingExport {
  Refuse,     // a file of that name is there: ExportExists, nothing written
  Overwrite,  // replace it
  NewName,    // write beside it: <name>-2, <name>-3, ... (the first free one)
};
struct ExportOptions {
  std::optional<int64_t> step;   // the checkpoint of this step; none = the newest intact one
  std::filesystem::path outDir;  // empty = <runDir>/exports
  ExistingExport existing = ExistingExport::Refuse;
  std::string softwareVersion = kVersion;
  // Polled before each file: true stops the export there with Interrupted (the
  // files written so far stay; none is left half-written).
  std::function<bool()> stopRequested;
};

// Thrown by exportRun (ExistingExport::Refuse) when a file it would write is
// there; `paths` names each such file. Nothing is written then.
class ExportExists : public IoError {
 public:
  ExportExists(const std::string& message, std::vector<std::filesystem::path> paths)
      : IoError(message), paths(std::move(paths)) {}
  std::vector<std::filesystem::path> paths;
};

// The files an export of `runDir`'s checkpoint of `step` in `formats` writes into
// `outDir` (empty = <runDir>/exports), before any new name is chosen. Reads only
// the run's config. Throws like exportRun for a folder that is not a run.
std::vector<std::filesystem::path> exportPaths(const std::filesystem::path& runDir,
                                               const std::vector<config::ExportFormat>& formats, int64_t step,
                                               const std::filesystem::path& outDir = {});

// Writes the LoRA of one of `runDir`'s checkpoints (EMA weights when the run had
// EMA) in each format. Without options.step: the latest intact checkpoint (a
// damaged newer one is passed over and said so in `notes`); with it: that step's,
// refused when it is missing or damaged (the steps there are named). Returns the
// files. Throws strata::Error with the reason (a LoRA with NaN/Inf is refused),
// ExportExists for a file in the way under ExistingExport::Refuse.
std::vector<std::filesystem::path> exportRun(const std::filesystem::path& runDir,
                                             const std::vector<config::ExportFormat>& formats,
                                             const ExportOptions& options = {},
                                             std::vector<std::string>* notes = nullptr);

}  // namespace strata::train
