#pragma once
// Internals of the Trainer, split out so the loop in Trainer.cpp stays readable
// and the pieces can be tested: the training state, the run folder, the run's
// devices, the data order, device cache release. Model-neutral: a family's own
// pieces (its model, datasets, micro-step, samples) are in core/families/<arch>/
// behind train/ModelFamily.h.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/Interrupted.h"
#include "config/RunConfig.h"
#include "events/EventBus.h"
#include "lora/LoraNetwork.h"
#include "nn/Quantize.h"
#include "placement/Placement.h"
#include "train/CheckpointedRunner.h"
#include "train/Collective.h"
#include "train/Ema.h"
#include "train/LrSchedule.h"
#include "train/LoraOptimizer.h"
#include "train/LossScaler.h"
#include "train/OptimizerState.h"
#include "train/RunFolder.h"
#include "train/RunFolderLock.h"
#include "train/RunContext.h"
#include "train/RunPlanning.h"
#include "train/StepGraph.h"
#include "train/Trainer.h"

namespace strata::train {

class FamilyRun;
class ModelFamily;
class GradientReducer;
class RunSink;

// A NaN or Inf loss or gradient norm: the run stops, naming the step.
class NonFiniteLoss : public Error {
 public:
  using Error::Error;
};

// Everything a run allocates; destroyed at the end of the run, attachments and
// the optimizer before the model, so nothing is left on any device.
struct Trainer::State {
  // The model family (model.arch) and its side of this run (train/ModelFamily.h).
  const ModelFamily* familyDef = nullptr;
  std::unique_ptr<FamilyRun> family;  // holds the model; released after the placement
  std::unique_ptr<placement::Placement> placement;
  std::unique_ptr<CheckpointedRunner> checkpointed;
  nn::BlockRunner* runner = nullptr;  // placement, or checkpointing over it
  std::shared_ptr<lora::LoraNetwork> network;
  NamedParams namedParams;  // "<module>.lora_A.weight" -> live parameter
  std::shared_ptr<LoraOptimizer> optimizer;
  std::unique_ptr<Ema> ema;
  std::unique_ptr<LrSchedule> schedule;
  LossScaler scaler;  // enabled for fp16 compute only
  at::Generator gen;
  std::vector<c10::Device> devices;
  PhaseTimer* phases = nullptr;  // TrainerOptions::phaseTimer, when timing phases
  // train.cuda_graph: the recorded forward and backward, null where the run does not
  // use one (off, not possible here, or dropped); the steps this process ran before
  // recording it.
  std::unique_ptr<StepGraph> graph;
  std::string graphOff;  // why the graph is off where the run's setup line says so (decideStepGraph)
  int64_t stepsBeforeGraph = 0;
  bool lastStepReplayed = false;
  // model.attention_backend: auto's choices (nn::attentionDecisions) said so far.
  size_t attentionNotesSaid = 0;

  // Data cursor and counters (checkpointed).
  DataCursor cursor;
  double lossEmaRaw = 0.0;
  int64_t lossCount = 0;

  // What the family sees of this state (train/RunContext.h); the run folder's one
  // writer, once the folder is locked (train/RunSink.h); the reduce point of every
  // optimizer step (train/GradientReducer.h).
  std::unique_ptr<RunContext> context;
  std::shared_ptr<RunSink> sink;
  std::shared_ptr<GradientReducer> reducer;
  // TrainerOptions::collective (null: one process). The micro-batch being drawn
  // (its step and index in the step) places each drawn sample in the step's global
  // batch (RunContext::sampleGenerator).
  std::shared_ptr<Collective> collective;
  int64_t drawStep = 0;
  int64_t drawMicroBatch = 0;

  std::string lastCheckpoint;
  int64_t lastCheckpointStep = -1;
  int64_t lastSampleStep = -1;

  // The run as a whole (set by the stages, read by the ones after).
  PreparedRun prepared;                      // preflight: validation, shape, devices, plan
  std::optional<CheckpointData> resumeData;  // preflight: the checkpoint a resume continues from
  std::string resumePath;                    // its folder (the newest intact one)
  RunFolderLock lock;                        // preflight: this process's hold on the run folder
  std::string planReason;                    // build and place
  int64_t auditedTensors = 0;                // restore: attachment tensors the audit checked
  bool auditedAfterFirstStep = false;        // loop: audited again after the first optimizer step
  int64_t startStep = 0;                     // restore
  double lastLoss = 0.0;                     // loop
  std::deque<double> recentStepMs;           // loop: the last 20 step times, for the ETA
  std::chrono::steady_clock::time_point wallStart = std::chrono::steady_clock::now();
  // The trainer's stop request (Trainer::requestStop), for the stages before the
  // first step: a family polls it between loading stages and cache batches.
  std::function<bool()> stopRequested;

  ~State();
};

// Throws Interrupted("<where>") when the run was asked to stop: a point in the
// preparation (caching, loading) where stopping loses nothing.
void stopPoint(const Trainer::State& st, const std::string& where);

at::ScalarType scalarTypeOf(config::DType d);

// `dir` if it holds no earlier run, else dir_2, dir_3, ...
std::filesystem::path freeRunDir(const std::filesystem::path& dir);

// The run folder, locked (one process per folder) and cleaned of what a killed
// run left behind (RunFolder::recover). A new run in a derived folder
// (`derivedNewRun`: no --run-dir) takes the first of dir, dir_2, ... that holds
// no earlier run and is not locked by a live process; otherwise `dir` itself, or
// RunFolderBusy naming the holder's pid. `notes` say which folder was taken
// instead and what was repaired.
struct OpenedRunFolder {
  std::filesystem::path dir;
  RunFolderLock lock;
  std::vector<std::string> notes;
};
OpenedRunFolder lockRunFolder(const std::filesystem::path& dir, bool derivedNewRun);

// The run's CUDA devices made ready, once per run and before anything is put
// there: each allocator initialised, the memory caps (model.gpu_memory_limit_gb)
// set, cuDNN attention allowed or not (model.attention_backend). A no-op for a CPU run.
void prepareDevices(const config::RunConfig& cfg, const PreparedRun& run);
// What to add to the message of a run that failed with `what` on a CUDA device
// while cuDNN's attention was allowed (model.attention_backend: cudnn, FLUX
// families): cuDNN's attention has failed with its own message, with an illegal
// memory access and with non-finite gradients (docs/training.md), and flash is the
// way out. Definite for cuDNN's attention message, hedged for the others; "" where
// the message points elsewhere or the setting does not apply.
std::string attentionBackendHint(const std::string& what, const config::RunConfig& cfg, bool onCuda);
// Whether the run may use cuDNN's attention (model.attention_backend auto or cudnn, on a
// family whose layers use it); prepareDevices sets the switches from this and the next.
bool cudnnAttentionAllowed(const config::RunConfig& cfg);
// Whether the kernel is chosen per shape by timing (model.attention_backend: auto).
bool attentionChosenPerShape(const config::RunConfig& cfg);
// How the run holds its base and runs its step, said once in the run header of the
// CLI and the app: the base's dtype and quantization, the attention kernel, whether
// the step is a CUDA graph, checkpointing and what lives in host memory. `graphed`:
// the step graph was set up (Trainer::startStepGraph); `graphOff`: else why not, where
// that is said here (train.cuda_graph: auto); `onCuda`: the run's devices.
std::string describeRunSetup(const config::RunConfig& cfg, bool onCuda, bool graphed, const std::string& graphOff = "");

// LoRA dropout draws its masks from the default generators, seeded alike on every
// data-parallel rank for the one LoRA initialisation: ranks > 0 get streams of their
// own (from the seed, the step the run starts at and the rank), or each rank would
// drop the same features of different samples. Rank 0 keeps its state, so a run of
// one rank is unchanged. (The masks are per rank, not per sample: with
// network.dropout > 0 a run's numbers depend on how many ranks share it.)
void seedRankDropout(int64_t seed, int64_t startStep, int rank);

// Where the stem goes (the first device of the run): the images run's VAE and
// text encoders are loaded there.
c10::Device firstDevice(const PreparedRun& run);

// Where a family builds its model and how the model is split, with the devices made
// ready (prepareDevices): the first device of the run and no plan, or with
// model.split_model_over_gpus the run's plan, built on the CPU under per-card caps
// (the whole model may not fit the first card).
struct DeviceSetup {
  c10::Device buildDevice = c10::Device(c10::kCPU);
  std::optional<placement::Plan> plan;
};
DeviceSetup setUpDevices(const config::RunConfig& cfg, const PreparedRun& run);
// With a plan, where a family builds block i of a model it loads from a file: on its
// plan device, so the model is never whole on one card. Empty without a plan.
std::function<c10::Device(size_t blockIndex)> planBlockDevice(const DeviceSetup& setup);
// For a model built from random weights, called with block i once it is built: it
// quantizes the block (unless qtype is None) and, with a plan, moves it to its plan
// device before the next one exists, so the build device never holds the whole model.
// The values come from the build device's generator: the random base does not depend
// on the plan, and a resume rebuilds the same one. Empty when there is nothing to do.
std::function<void(size_t blockIndex, torch::nn::Module& block)> randomBlockHook(nn::QuantType qtype,
                                                                                 const DeviceSetup& setup);
// Whether the run's fp8 Linears keep their transposed weights (model.fp8_keep_transpose
// with what it needs: an fp8 qtype, fp8_matmul and fp8_backward), as the planners count them.
bool keepsFp8Transposes(const config::ModelConfig& m);
// The placement of `blocks` by setup's plan, or all on its build device, and the
// reason saying which. Attachments and apply() are the family's.
PlacedModel placeBlocks(nn::BlockList blocks, const DeviceSetup& setup);
// model.fp8_matmul, once the blocks are placed: each block's first fp8 Linear runs one
// tiny matmul in `dtype` where it lives (nn::checkFp8Matmul), so a LibTorch build or a
// card without the row-wise fp8 matmul is refused before the first step, naming the key.
void checkFp8MatmulRuns(const nn::BlockList& blocks, at::ScalarType dtype);

// A run folder with its config and latest checkpoint, for resume and export.
struct OpenedRun {
  RunFolder folder;
  config::RunConfig config;
  CheckpointRef latest;
};
// Throws IoError when `runDir` is not a run folder or has no checkpoint (`purpose`:
// "resume from", "export"), ConfigError when its config.yaml has errors.
OpenedRun openRunFolder(const std::filesystem::path& runDir, const std::string& purpose);

// Empties the CUDA caching allocator (no-op on a CPU build).
void releaseDeviceCaches();
// Sets every device's memory cap back to `before` (device::memoryCaps() taken
// earlier) where it differs now. Returns a line per device it could not restore
// (nothing is thrown: it runs after the run, whatever ended it).
std::vector<std::string> restoreMemoryCaps(const std::map<int, int64_t>& before);

}  // namespace strata::train
