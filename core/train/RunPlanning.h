#pragma once
// Preparing a run, once for the trainer, `strata-train plan` and the app's planned
// GPU map, so the plan a user previews is the plan a run makes: prepareRun turns a
// config and a device inventory (this machine's or simulated) into the problems
// (the validator's, with key and line), the model's shape, the devices and their
// caps and budgets, and the plan, from shapes alone (no weights are read). Light
// to include (no ATen), as the UI needs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/Problem.h"
#include "config/RunConfig.h"
#include "device/DeviceInfo.h"
#include "device/DeviceSelection.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"

namespace strata::train {

// `base` (a preset or a checkpoint's shapes) with the config's explicit shape
// keys applied (model.num_layers, in_channels, ...), then validated.
flux::FluxConfig withShapeOverrides(flux::FluxConfig base, const config::ModelConfig& m);

// The model's shape: the checkpoint's headers when weights are read (random_weights
// off, model.name_or_path given and present here), else the preset (tiny, or
// flux-dev; a preview may be made on a machine that lacks the file); then the
// overrides. `source` (optional) says which, for the user. Throws on a bad header.
flux::FluxConfig planFluxConfig(const config::ModelConfig& m, std::string* source = nullptr);

// Image plus text tokens of one training sample at the largest dataset
// resolution: through the VAE (8x), or the demo's pixel code, packed 2x2; the
// text tokens the trainer gives a model of this width (defaultTextTokens).
int64_t planTokens(const config::RunConfig& cfg, const flux::FluxConfig& fc);
// FLOPs of one training step of this config (flux::fluxTrainStepFlops at the
// planned tokens, the batch size and the LoRA targets of the config).
double trainStepFlops(const config::RunConfig& cfg, const flux::FluxConfig& fc);

// The modules beside the transformer that a FLUX.1 run holds on its first
// device (`device`: "cuda:0", "cpu"), for the planner. The order a run follows,
// all before the transformer is built and placed: the VAE (its compute dtype)
// loads and encodes the images (batches of kCacheBatchSize); then T5 and CLIP
// (bf16 on a GPU, float32 on the cpu) load beside it, encode the captions and
// the sample prompts, and are freed before step 1; the VAE stays for the whole
// run and decodes the samples, one at a time. Only an `images` dataset needs them (shapes,
// synthetic and latents datasets bring their own embeddings): otherwise none.
// Shapes: the files of model.name_or_path (+ vae_path, clip_path, t5_path) when
// read (random_weights off), else FLUX.1's presets. `note` (optional) says which
// parts, their dtype, bytes and source, and what the activations are sized for,
// or why there are none. Throws for a file that is here but unreadable.
std::vector<placement::OtherModule> fluxOtherModules(const config::RunConfig& cfg, const std::string& device,
                                                     std::string* note = nullptr);

struct RunPlanInput {
  placement::PlannerInput input;        // devices empty: the caller's to fill
  std::map<std::string, int> adapters;  // LoRA adapters per unit id ("stem", "transformer_blocks.0", ...)
};

// Per-unit parameters and LoRA-targeted Linears (network.target_modules), the
// cost options of the config (dtype, rank, EMA, batch, checkpointing), the
// placement mode and ai-toolkit's other-module scale (the other modules
// themselves depend on the first device: prepareRun adds them).
RunPlanInput runPlanInput(const config::RunConfig& cfg, const flux::FluxConfig& fc, int64_t tokens);

struct PrepareOptions {
  const config::SourceMap* where = nullptr;  // lines for the problems (a loaded file)
  // A preview (`strata-train plan`, the app's map), maybe for another machine:
  // only the rules a plan needs (ranges, model, devices), no paths. A run: all.
  bool preview = false;
  // More bytes kept on the first device for the whole run, beyond the parts the
  // plan counts itself (`strata-train plan --other-gb`).
  int64_t extraFirstDeviceBytes = 0;
};

struct PreparedRun {
  // The validator's errors and warnings, then the preparation's own; when there
  // are errors the rest may be empty.
  std::vector<config::Problem> problems;
  bool ok() const { return !config::hasErrors(problems); }

  flux::FluxConfig model;
  std::string modelSource;  // "preset tiny", "shapes of /models/x (headers only)", ...
  int64_t tokens = 0;
  std::string devicesSource;                // the inventory's source
  std::vector<device::DeviceInfo> devices;  // the run's, in fill order (the cpu alone for a CPU run)
  std::vector<int64_t> capBytes;            // per device; 0 = no cap
  std::vector<int64_t> freeBytes;           // per device; 0 = unknown (simulated, the cpu)
  RunPlanInput input;                       // with the devices' budgets
  placement::Plan plan;
  // Sentences for the user: why the devices are these (the cpu for model.device
  // cpu, the first GPU without split_model_over_gpus; empty for a split), and
  // which modules run beside the transformer (fluxOtherModules' note).
  std::string devicesNote;
  std::string otherModulesNote;
};

// The plan in words, one paragraph: the devices note, the other modules' note
// and the planner's reason. `strata-train plan` prints it under the table and the
// app's plan view shows it: one text for both.
std::string describePlan(const PreparedRun& run);

// Validates `cfg` against `inventory` (every rule, or a preview's), then, without
// errors, sizes the model and plans it over the devices the config means. Never throws for a bad config or device:
// every problem is in `problems`, with its key and, given options.where, its line.
PreparedRun prepareRun(const config::RunConfig& cfg, const device::Inventory& inventory,
                       const PrepareOptions& options = {});

// The plan of the same run with the frozen blocks quantized (model.quantize), for
// each weight-only type in order of quality (qfloat8, int8), for a plan that does
// not fit: says which quantization would make it fit.
struct QuantizedAlternative {
  std::string qtype;
  placement::Plan plan;
};
std::vector<QuantizedAlternative> quantizedAlternatives(const config::RunConfig& cfg,
                                                        const device::Inventory& inventory,
                                                        const PrepareOptions& options = {});

}  // namespace strata::train
