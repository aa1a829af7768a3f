#pragma once
// Preparing a run, once for the trainer, `strata-train plan` and the app's planned
// GPU map, so the plan a user previews is the plan a run makes: prepareRun turns a
// config and a device inventory (this machine's or simulated) into the problems
// (the validator's, with key and line), the model's size, the devices and their
// caps and budgets, and the plan, from shapes alone (no weights are read). The
// model's part comes from its family (train/ModelFamily.h: FamilyPlan, the other
// modules); nothing here names one. Light to include (no ATen), as the UI needs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/Problem.h"
#include "config/RunConfig.h"
#include "device/DeviceInfo.h"
#include "device/DeviceSelection.h"
#include "placement/Planner.h"

namespace strata::train {

// The planner's input for a model: per-unit shapes and costs (ModelFamily::plan).
struct RunPlanInput {
  placement::PlannerInput input;        // devices and other modules empty: prepareRun fills them
  std::map<std::string, int> adapters;  // LoRA adapters per unit id ("stem", "transformer_blocks.0", ...)
};

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

  std::string modelSource;   // "preset tiny", "shapes of /models/x (headers only)", ...
  std::string modelSummary;  // the model in one line, from its family ("FLUX preset tiny, 2 double + ...")
  int64_t tokens = 0;
  std::string tokensNote;                   // FamilyPlan::tokensNote
  std::string devicesSource;                // the inventory's source
  std::vector<device::DeviceInfo> devices;  // the run's, in fill order (the cpu alone for a CPU run)
  std::vector<int64_t> capBytes;            // per device; 0 = no cap
  std::vector<int64_t> freeBytes;           // per device; 0 = unknown (simulated, the cpu)
  RunPlanInput input;                       // with the devices' budgets
  placement::Plan plan;
  // Sentences for the user: why the devices are these (the cpu for model.device
  // cpu, the first GPU without split_model_over_gpus; empty for a split), and
  // which modules run beside the model (ModelFamily::otherModules' note).
  std::string devicesNote;
  std::string otherModulesNote;
  // Whether the run recomputes activations: the config's train.gradient_checkpointing,
  // or what `auto` chose, and then why in one sentence (checkpointingNote, else empty).
  bool gradientCheckpointing = true;
  std::string checkpointingNote;
  // Whether AdamW's moments wait in host memory: the config's train.offload_optimizer_state,
  // or what `auto` chose, and then why in one sentence (offloadNote, else empty).
  bool offloadOptimizerState = false;
  std::string offloadNote;
};

// The plan in words, one paragraph: the devices note, the tokens note, the other
// modules' note and the planner's reason. `strata-train plan` prints it under the table and the
// app's plan view shows it: one text for both.
std::string describePlan(const PreparedRun& run);

// cfg with the values `auto` resolved to in `run` (train.gradient_checkpointing and
// train.offload_optimizer_state; the keys still read auto): what the trainer and the
// bench build the step from.
void adoptAutoChoices(config::RunConfig& cfg, const PreparedRun& run);

// What the `auto` keys chose and why (checkpointingNote, offloadNote), joined by "; "
// ("" when no key was auto): the run's header and `strata-train bench`'s paths line.
std::string autoChoiceNotes(const PreparedRun& run);

// Validates `cfg` against `inventory` (every rule, or a preview's), then, without
// errors, sizes the model and plans it over the devices the config means. Never throws for a bad config or device:
// every problem is in `problems`, with its key and, given options.where, its line.
PreparedRun prepareRun(const config::RunConfig& cfg, const device::Inventory& inventory,
                       const PrepareOptions& options = {});

// Why a run with this plan must not start ("" when it may): the plan does not fit
// its devices, training phase or caching phase. The words are the same for a split
// and for one card: "the model does not fit: " and the plan's reason. A run on the
// cpu alone is not refused (its budget is the host's RAM, which the system may
// swap), nor a device whose budget is unknown (the planner then counts it as fitting).
std::string planRefusal(const PreparedRun& run);

// The ways out of a plan that does not fit (empty when planRefusal has nothing
// to say), each in the config's own keys and each planned again on the same
// devices to say whether it fits alone: quantizing the frozen blocks
// (model.quantize with the qtype that fits), splitting over the GPUs there are
// or over more (model.split_model_over_gpus, model.gpu_ids), the memory cap per
// card (model.gpu_memory_limit_gb, model.memory_reserve_gb), and gradient
// checkpointing. The CLI's refusal and the app's Start both list them.
std::vector<std::string> planWayOut(const config::RunConfig& cfg, const device::Inventory& inventory,
                                    const PreparedRun& run, const PrepareOptions& options = {});

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
