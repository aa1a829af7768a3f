#pragma once
// What the trainer needs from a model family (DESIGN §2b), and the one registry
// that picks the family by model.arch. train/ sees a family only through this
// interface; a family implements it in its own library (core/families/<arch>/),
// which links train/ and its models/<family>, and registers it once
// (core/families/Registration.cpp). The trainer's loop, checkpoints, resume,
// EMA, the fp16 loss scaler and the event stream are the same for every family.
//
// ModelFamily is stateless (one object per arch, shared); a run gets its own
// FamilyRun, which holds the family's side of that run (its model, datasets,
// tokenizer) next to the trainer's state that holds the placement, the LoRA
// network, the optimizer and EMA, and sees that state through a RunContext.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/Problem.h"
#include "config/RunConfig.h"
#include "events/EventBus.h"
#include "lora/LoraNetwork.h"
#include "nn/LoraNameRules.h"
#include "train/ConfigTemplates.h"
#include "train/RunContext.h"
#include "train/RunFolder.h"
#include "train/RunPlanning.h"
#include "train/RunSink.h"
#include "train/Trainer.h"

namespace strata::train {

// The run's family side. Called on the training thread, in the order of a run,
// with the run's context (train/RunContext.h): what the family may read and draw
// with. It gives its placement and its samples back as values and writes nothing
// into the run folder (the trainer's RunSink does).
class FamilyRun {
 public:
  virtual ~FamilyRun() = default;

  // Preflight, after the run folder is locked: the datasets (and what they need,
  // e.g. a tokenizer, or the text encoders and VAE that fill an images dataset's
  // cache on the first device of run.prepared()). Throws with the reason (ConfigError
  // naming the key, IoError naming the file).
  virtual void prepareData(RunContext& run) = 0;

  // Builds the model (seeded by train.seed, weights read or random), frozen, and
  // places it: returns the placement, applied, with its reason. The devices are
  // those of run.prepared() (prepareDevices), the plan its plan for a split
  // (preflight has refused one that does not fit), else the one device. A long
  // load says how far it is on run.bus() (events::LoadProgressEvent).
  virtual PlacedModel buildAndPlace(RunContext& run) = 0;
  // The built model, for the LoRA network to attach to.
  virtual torch::nn::Module& module() = 0;
  // The LoRA name rules: default targets, the file forms.
  virtual const nn::LoraNameRules& loraRules() const = 0;

  // One micro-batch of `batch` items drawn with the run's cursor and generator, as
  // the tensors microLoss reads (in the family's order), queued to their devices.
  // Everything the host decides per step (the draw, noise, noise levels, caption
  // dropout) is decided here.
  virtual std::vector<at::Tensor> microBatch(RunContext& run, int64_t batch, int64_t step) = 0;
  // The float32 loss of a micro-batch from microBatch, autograd graph kept. Reads
  // no tensor's value on the host: train.cuda_graph records it once and replays it
  // with each step's micro-batch copied into the recorded one.
  virtual at::Tensor microLoss(RunContext& run, const std::vector<at::Tensor>& batch) = 0;

  // Why this run's micro-batches may change shape from one step to the next, after
  // prepareData ("" where every micro-batch has one shape: one resolution bucket, rows
  // of one length). train.cuda_graph: auto records the step only where they keep one
  // (a graph replays one shape, and a micro-batch of other shapes drops it). Unknown
  // by default, which leaves auto's graph off.
  virtual std::string microBatchShapeChange() const {
    return "the model family does not say that its micro-batches keep one shape";
  }

  // Why this run makes no samples ("" when it does): the trainer says so once per
  // sampling step instead of asking for them.
  virtual std::string samplesProblem() const { return ""; }
  // The sample of sample.prompts[promptIndex] at `step`, as a value (the trainer's
  // RunSink writes it). The trainer has swapped the EMA weights in, turned LoRA
  // dropout and autograd off. Throws with the reason: a warning, and the next prompt.
  virtual Sample sample(RunContext& run, int64_t step, size_t promptIndex) = 0;

  // Writes the live LoRA (EMA already swapped in by the caller) in `format` at
  // `path` (a file or a folder), the path the trainer's RunSink gives.
  virtual void exportLora(RunContext& run, config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                          const std::string& runYaml, const std::string& softwareVersion) = 0;

  // Releases the model (after the trainer has released the placement).
  virtual void release() {}
};

// A family's part of the planner's input for a run (train::prepareRun adds the
// devices, the other modules and the budgets).
struct FamilyPlan {
  RunPlanInput input;
  int64_t tokens = 0;   // per sample, through every block
  std::string source;   // where the shape came from: "preset tiny", "shapes of /m (headers only)", ...
  std::string summary;  // the model in one line, for `strata-train plan`
  // Where `tokens` came from when the config alone does not say (a latents dataset's
  // files); empty otherwise. One sentence, for describePlan.
  std::string tokensNote;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // model.arch: the id its config::FamilyDescription is registered under ("flux").
  virtual std::string arch() const = 0;
  // For messages: "FLUX.1", "Llama" (its config::FamilyDescription's; the id when none is registered).
  std::string displayName() const;

  virtual std::unique_ptr<FamilyRun> newRun() const = 0;

  // The planner's input from the config alone (no weights read): per-unit
  // shapes, the LoRA adapters per unit and the cost options. Throws with the
  // reason (prepareRun reports it under planKey).
  virtual FamilyPlan plan(const config::RunConfig& cfg) const = 0;
  // The config key a failure of plan() is reported under.
  virtual std::string planKey(const config::RunConfig& cfg) const;
  // What a run holds beside the model on its first device (`device`: "cuda:0",
  // "cpu"), for the planner: a diffusion model's text encoders and VAE, each with
  // its caching stage (the caching phase). `note` (optional) says which, their
  // sizes and source, or why there are none. None by default. Throws for a file
  // that is here but unreadable.
  virtual std::vector<placement::OtherModule> otherModules(const config::RunConfig& cfg, const std::string& device,
                                                           std::string* note) const;

  // What the config's datasets (and what reads them, a tokenizer) give, read from
  // the disk without building a model: a dataset that yields no sample and a missing
  // tokenizer, each under its key with the reason (the files' own problems, not the
  // paths: config::validate says whether they exist). For `strata-train validate`
  // and the app's problem list, before Start. The default checks images datasets
  // (no usable image in the folder); a family adds what its own datasets need.
  virtual std::vector<config::Problem> dataProblems(const config::RunConfig& cfg, const config::SourceMap* where) const;

  // The work of one micro-batch of this config (train.batch_size samples, forward
  // and backward, frozen base, LoRA trained), in FLOPs, for `strata-train bench`;
  // activation recompute not counted. An optimizer step runs
  // train.gradient_accumulation_steps of them.
  virtual double trainStepFlops(const config::RunConfig& cfg) const = 0;

  // The prefix of the LoRA keys in a run's checkpoint ("transformer.").
  virtual std::string checkpointPrefix() const = 0;

  // File > New's templates of this family (train/ConfigTemplates.h); none by default.
  virtual std::vector<ConfigTemplate> templates() const { return {}; }

  // The path an export in `format` goes to, below `dir` (a file or a folder).
  virtual std::filesystem::path exportPathIn(const std::filesystem::path& dir, const config::RunConfig& cfg,
                                             config::ExportFormat format, std::optional<int64_t> step) const;

  // Why this family cannot write `format` ("" when it can): the FLUX file forms
  // (diffusers, kohya, comfy) or a causal LM's peft folder.
  virtual std::string formatProblem(config::ExportFormat format) const = 0;

  // A short CPU run of this family's tiny model (random weights, generated data,
  // float32), writing in every form the family exports, with `folder` as its
  // training folder; what the config names is written there (a model folder's
  // config.json). Every family is checked with it (tests/families' conformance suite).
  virtual config::RunConfig tinyRun(const std::filesystem::path& folder) const = 0;

  // Writes a checkpoint's LoRA (module weights in the model's own paths) in
  // `format` at `path`, without a model (strata-train export).
  virtual void exportModules(const std::vector<lora::LoraModuleWeights>& modules, const config::RunConfig& cfg,
                             config::ExportFormat format, const std::filesystem::path& path, int64_t step,
                             const std::string& softwareVersion) const = 0;
};

// What every family's tinyRun shares: a CPU run of 6 steps from random weights,
// float32, rank 4 (alpha 8), seed 5, no samples, a checkpoint every 3 steps, in
// `folder` as job "<arch>-tiny". The family adds its model and dataset.
config::RunConfig tinyRunSettings(const std::string& arch, const std::filesystem::path& folder);

// The one registry of runs. registerModelFamily is called by
// strata::families::registerAll() (core/families/Registration.h), which every program
// calls from main(), next to config::registerFamily (what the family says about
// itself: config/FamilyRegistry.h); a second registration of an arch replaces the first.
void registerModelFamily(std::shared_ptr<const ModelFamily> family);
// The family of `arch`. Throws ConfigError naming model.arch when this program
// has none registered for it.
const ModelFamily& modelFamily(const std::string& arch);
bool hasModelFamily(const std::string& arch);
// Every registered family, in model.arch order.
std::vector<const ModelFamily*> registeredModelFamilies();

// The family's dataProblems for cfg.model.arch (none when this program has no such family).
std::vector<config::Problem> dataProblems(const config::RunConfig& cfg, const config::SourceMap* where = nullptr);

}  // namespace strata::train
