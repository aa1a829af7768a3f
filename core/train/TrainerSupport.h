#pragma once
// Internals of the Trainer, split out so the loop in Trainer.cpp stays readable
// and the pieces can be tested: the training state, preflight checks, model
// building and placement, one micro-step, sampling, device cache release.
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
#include "config/RunConfig.h"
#include "events/EventBus.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxTransformer.h"
#include "placement/Placement.h"
#include "train/CheckpointedRunner.h"
#include "train/Datasets.h"
#include "train/Ema.h"
#include "train/ImagesRun.h"
#include "train/LrSchedule.h"
#include "train/LossScaler.h"
#include "train/OptimizerState.h"
#include "train/RunFolder.h"
#include "train/RunFolderLock.h"
#include "train/RunPlanning.h"
#include "train/TextEmbedder.h"
#include "train/Trainer.h"

namespace strata::train {

class FamilyRun;
class ModelFamily;

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
  std::unique_ptr<FamilyRun> family;
  flux::FluxConfig fluxConfig;
  std::shared_ptr<flux::FluxTransformer> model;
  std::unique_ptr<placement::Placement> placement;
  std::unique_ptr<CheckpointedRunner> checkpointed;
  nn::BlockRunner* runner = nullptr;  // placement, or checkpointing over it
  std::shared_ptr<lora::LoraNetwork> network;
  NamedParams namedParams;  // "<module>.lora_A.weight" -> live parameter
  std::shared_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<Ema> ema;
  std::shared_ptr<Dataset> dataset;
  std::unique_ptr<WordEmbedder> promptEmbedder;
  TextEmbedding emptyPrompt;
  std::unique_ptr<ImagesRun> images;  // an images run: its encoders, sample prompts and decoder
  std::unique_ptr<LrSchedule> schedule;
  LossScaler scaler;  // enabled for fp16 compute only
  at::Generator gen;
  std::vector<c10::Device> devices;
  PhaseTimer* phases = nullptr;  // TrainerOptions::phaseTimer, when timing phases
  events::EventBus* bus = nullptr;  // the run's bus, for stages that take none (the model load's progress)
  bool pixelCode = false;  // the shapes demo: latents are the pixel code
  int64_t textTokens = 16;

  // Data cursor and counters (checkpointed).
  int64_t drawCursor = 0;
  int64_t skippedItems = 0;
  double lossEmaRaw = 0.0;
  int64_t lossCount = 0;
  int64_t permEpoch = -1;
  std::vector<int64_t> perm;

  std::string lastCheckpoint;
  int64_t lastCheckpointStep = -1;
  int64_t lastSampleStep = -1;

  // The run as a whole (set by the stages, read by the ones after).
  PreparedRun prepared;                      // preflight: validation, shape, devices, plan
  std::optional<CheckpointData> resumeData;  // preflight: the checkpoint a resume continues from
  std::string resumePath;                    // its folder (the newest intact one)
  RunFolderLock lock;                        // preflight: this process's hold on the run folder
  std::string planReason;                    // build and place
  int64_t startStep = 0;                     // restore
  double lastLoss = 0.0;                     // loop
  std::deque<double> recentStepMs;           // loop: the last 20 step times, for the ETA
  std::chrono::steady_clock::time_point wallStart = std::chrono::steady_clock::now();

  ~State();
};

at::ScalarType scalarTypeOf(config::DType d);
lora::LoraFileFormat fileFormatOf(config::ExportFormat f);

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
// set, cuDNN attention off. A no-op for a CPU run.
void prepareDevices(const config::RunConfig& cfg, const PreparedRun& run);
// Where the stem goes (the first device of the run): the images run's VAE and
// text encoders are loaded there.
c10::Device firstDevice(const PreparedRun& run);

struct BuiltModel {
  std::shared_ptr<flux::FluxTransformer> model;
  std::unique_ptr<placement::Placement> placement;  // applied
  std::vector<c10::Device> devices;
  std::string reason;  // the planner's reason, or "single device cpu"
};
// On the prepared devices: memory caps, then the model built (seeded), its
// weights read, frozen and placed (the prepared plan for a split, else the one
// device). Each block is built on the device the plan gives it and, with
// weights from a file, filled (and quantized under model.quantize) before the
// next block exists (flux::streamFluxTransformer). onLoadProgress: units loaded,
// units in all. Throws PlacementError / LoadError.
BuiltModel buildPlacedModel(const config::RunConfig& cfg, const PreparedRun& run,
                            const std::function<void(int64_t done, int64_t total)>& onLoadProgress = {});

// A run folder with its config and latest checkpoint, for resume and export.
struct OpenedRun {
  RunFolder folder;
  config::RunConfig config;
  CheckpointRef latest;
};
// Throws IoError when `runDir` is not a run folder or has no checkpoint (`purpose`:
// "resume from", "export"), ConfigError when its config.yaml has errors.
OpenedRun openRunFolder(const std::filesystem::path& runDir, const std::string& purpose);

// <outDir or exports/>/<job>[_step<N>]_<format>.safetensors
std::filesystem::path exportPath(const RunFolder& folder, const config::RunConfig& cfg, config::ExportFormat format,
                                 std::optional<int64_t> step, const std::filesystem::path& outDir = {});
// The LoRA file's options and metadata for a run (`runYaml` empty: written from cfg).
lora::LoraExportOptions exportOptionsOf(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                        double alpha, const std::string& runYaml, const std::string& softwareVersion);

// One micro-batch: draws `batch` items (skipping unreadable ones, with a
// warning each), caption dropout, noise and timesteps from the trainer's
// generator, forward through the runner. Returns the float32 loss (graph kept).
at::Tensor microStep(Trainer::State& st, const config::RunConfig& cfg, int64_t batch, events::EventBus& bus,
                     int64_t step);

// Samples every prompt with the EMA weights swapped in, writes the PNGs and
// the samples index, emits SampleEvents. A failing prompt is a warning.
void sampleAll(Trainer::State& st, const config::RunConfig& cfg, const RunFolder& folder, int64_t step,
               events::EventBus& bus);

// Empties the CUDA caching allocator (no-op on a CPU build).
void releaseDeviceCaches();

}  // namespace strata::train
