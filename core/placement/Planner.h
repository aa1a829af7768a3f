#pragma once
// The placement planner (docs/design.md §2.7): a pure, deterministic function from
// per-block costs and per-device budgets to a device per block (contiguous
// ranges) and the reason. No tensors, no GPU: `strata-train plan` and the unit
// tests run it on any machine.
//
// Modes
//   param_count  ai-toolkit's rule (add_model_gpu_splitter_to_flux): the first
//                device is charged the modules outside the transformer (the other
//                modules' parameters x split_model_other_module_param_count_scale;
//                ai-toolkit uses a fixed 5e9, Strata the real parts' count) and the
//                parameter total is shared evenly. Where Strata differs from ai-toolkit:
//                  - the devices are the configured list (gpu_ids / --devices), not
//                    every visible GPU, and `cpu` may be one of them;
//                  - a block goes to the device whose share its midpoint falls in
//                    (cumulative count), so no device runs over by a whole block and
//                    rounding does not drift; ai-toolkit keeps the block that crosses
//                    the share on the current GPU and restarts its count at zero, so
//                    every GPU but the last is over its share and the last is short;
//                  - when the first device's fixed charge exceeds an even share, it
//                    gets no blocks and the others share them evenly (the shares are
//                    levelled, so no card is skipped);
//                  - the stem and head (embedders, norm_out, proj_out) are counted on
//                    the first device, where they live; ai-toolkit counts them in the
//                    total only;
//                  - the budgets are still checked and reported (fits / missing).
//   memory       every device gets a budget (cap or free memory, minus a reserve);
//                the blocks are split so that each device is filled to the same,
//                smallest possible fraction of its budget. A `cpu` device (offload)
//                takes only what the accelerators cannot hold. When the model cannot
//                fit, the plan says how much is missing on which device.
// In both modes the stem, the head and the other modules sit on the first device.
// A plan has two phases: caching (the other modules alone, before the
// transformer is placed: encoders load, encode the dataset and the sample
// prompts; those marked freedBeforeTraining are then freed) and training (what
// stays, next to the blocks). Both must fit. Caching is on the first device; when
// it does not fit there and the run has several devices, the largest other module
// that runs as layers (OtherModule::layerBytes: a text encoder that is a block
// model) has its layers split over the devices in contiguous ranges, planned like
// the blocks (memory: each device filled to the same share of its budget;
// param_count: an even count per device); the rest stays on the first device. A
// device left without blocks while a later one has some is explained in the reason.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "device/DeviceInfo.h"

namespace strata::placement {

// train.offload_optimizer_state: the moments staged to the card per piece of the step
// (train/FusedAdamW stages them in two slots of a piece; the planner counts both as workspace).
constexpr int64_t kOptimizerStagingChunkBytes = int64_t{64} << 20;

enum class PlanMode { ParamCount, Memory };
const char* toString(PlanMode mode);

// What one placement unit (stem, a block, head) costs on its device, in bytes.
struct BlockCost {
  std::string id;                  // "transformer_blocks.3", "stem", "head" (= nn::BlockSlot::id)
  std::string kind;                // "stem", "head", "double", "single", "layer", ...
  int64_t paramCount = 0;          // base parameters (param_count mode)
  int64_t weightBytes = 0;         // base parameters and buffers as stored (dtype, quantized)
  int64_t adapterBytes = 0;        // LoRA weights (float32)
  int64_t gradBytes = 0;           // gradients of the trainable weights
  int64_t emaBytes = 0;            // EMA shadows
  int64_t optimizerBytes = 0;      // optimizer state (AdamW: 2 x the trainable weights)
  int64_t activationBytes = 0;     // kept for the backward pass (summed over blocks)
  int64_t workspaceBytes = 0;      // transient while the block runs (max over a device's blocks)
  int64_t hostBytes = 0;           // kept in host memory for it (offloaded optimizer state): not the device's
  int64_t largestStagedBytes = 0;  // the moments of its largest LoRA tensor (staged for the step)

  int64_t residentBytes() const {
    return weightBytes + adapterBytes + gradBytes + emaBytes + optimizerBytes + activationBytes;
  }
};

struct DeviceBudget {
  std::string device;       // "cuda:0" or "cpu"
  std::string name;         // "NVIDIA H200", "simulated 16.0 GB"
  int64_t budgetBytes = 0;  // what the plan may use; 0 = unknown (param_count only)
};

// A module outside the blocks on the first device (text encoders, VAE): ai-toolkit's
// "other modules".
struct OtherModule {
  std::string name;   // "T5", "CLIP", "VAE"
  std::string dtype;  // what it runs in: "bf16", "fp32"
  int64_t paramCount = 0;
  int64_t weightBytes = 0;           // in that dtype
  int64_t cachingPeakBytes = 0;      // activations while it encodes one batch for the cache
  int64_t trainingPeakBytes = 0;     // activations while it runs during training (the VAE decoding samples)
  bool freedBeforeTraining = false;  // loaded for the cache and the sample prompts, freed before step 1
  // When it loads while the cache is built: stage 0 from the start (the VAE
  // encodes the images first), stage 1 once that is done (the text encoders
  // encode the captions next to it). A stage holds the weights of its own and
  // every earlier stage's modules, and the activations of its own.
  int cachingStage = 0;
  // A module that runs as a stem, layers and a head (a block model, run through a
  // placement while it caches) may have its layers split over the devices for the
  // caching phase: its stem's, each layer's and its head's bytes, which add up to
  // weightBytes. cachingPeakBytes is then what one layer needs while it encodes a
  // batch, on every device that runs a part of it. Empty layerBytes: it stays whole.
  int64_t stemBytes = 0;
  std::vector<int64_t> layerBytes;
  int64_t headBytes = 0;
  bool splittable() const { return !layerBytes.empty(); }
};

struct PlannerInput {
  PlanMode mode = PlanMode::ParamCount;
  BlockCost stem;
  std::vector<BlockCost> blocks;  // in forward order
  BlockCost head;
  std::vector<OtherModule> otherModules;    // none: nothing beside the model (cached or synthetic data)
  double otherModuleParamCountScale = 0.3;  // split_model_other_module_param_count_scale
  std::vector<DeviceBudget> devices;        // in the order blocks fill them

  int64_t otherParamCount() const;         // all other modules (param_count mode charges them, scaled)
  int64_t otherResidentBytes() const;      // weights of those kept through training
  int64_t otherTrainingPeakBytes() const;  // the largest activation peak of those, while training
};

// The caching phase on the first device, before any block is placed: per stage
// the weights loaded by then plus the largest activation peak of that stage's
// modules; the fullest stage counts.
struct CachingStage {
  int stage = 0;
  std::vector<std::string> modules;  // loaded in this stage
  int64_t weightBytes = 0;           // of every module loaded by then
  int64_t peakBytes = 0;
  int64_t totalBytes = 0;
};

// What one device holds during the caching phase.
struct CachingDevice {
  std::string device;
  int64_t budgetBytes = 0;           // 0 = unknown
  std::vector<std::string> modules;  // whole modules on it (the first device), input order
  bool hasSplitStem = false;         // the split module's stem / head (CachingPlan::splitModule)
  bool hasSplitHead = false;
  size_t firstLayer = 0;  // the split module's layers [firstLayer, endLayer); none when equal
  size_t endLayer = 0;
  int64_t weightBytes = 0;   // of everything it holds
  int64_t totalBytes = 0;    // its fullest stage: the weights loaded by then and that stage's peak
  int64_t missingBytes = 0;  // totalBytes - budgetBytes when over a known budget, else 0
  bool holdsSomething() const { return !modules.empty() || hasSplitStem || hasSplitHead || endLayer > firstLayer; }
};

struct CachingPlan {
  bool needed = false;               // any other module
  std::string device;                // the first device: every whole module, the split module's stem
  std::vector<CachingStage> stages;  // on the first device
  int64_t weightBytes = 0;           // the first device's fullest stage
  int64_t peakBytes = 0;
  int64_t totalBytes = 0;
  int64_t budgetBytes = 0;   // the first device's; 0 = unknown
  int64_t missingBytes = 0;  // over all devices
  bool fits = true;          // every device within its known budget
  // The module whose layers are split over the devices ("" when every module is
  // whole on `device`), where its stem, each layer and its head go.
  std::string splitModule;
  std::string splitStemDevice;
  std::vector<std::string> layerDevice;
  std::string splitHeadDevice;
  std::vector<CachingDevice> devices;  // one per input device, input order
  // Device of layer i of the split module; throws PlacementError when there is no
  // split or no such layer.
  const std::string& deviceOfLayer(size_t layer) const;
};

// One device in a plan.
struct DevicePlan {
  std::string device;
  std::string name;
  int64_t budgetBytes = 0;
  bool hasStem = false;
  bool hasHead = false;
  size_t firstBlock = 0;  // blocks [firstBlock, endBlock) of the input; empty when equal
  size_t endBlock = 0;
  std::vector<std::string> blockIds;
  int64_t paramCount = 0;  // base params of its blocks (+ stem/head/other share on the first)
  int64_t weightBytes = 0;
  int64_t adapterBytes = 0;
  int64_t gradBytes = 0;
  int64_t emaBytes = 0;
  int64_t optimizerBytes = 0;
  int64_t activationBytes = 0;
  int64_t workspaceBytes = 0;
  int64_t otherBytes = 0;      // other modules kept through training (first device)
  int64_t otherPeakBytes = 0;  // their activations while they run (the VAE decoding samples): not at
                               // the same time as the blocks' activations and workspace
  int64_t totalBytes = 0;      // everything above; workspace counted once (its max), the larger of
                               // activations + workspace and otherPeakBytes
  int64_t missingBytes = 0;    // totalBytes - budgetBytes when over a known budget, else 0
  int64_t hostBytes = 0;       // host memory its blocks keep (offloaded optimizer state): in totalBytes
                               // only on the cpu device, whose memory it is
};

struct Plan {
  PlanMode mode = PlanMode::ParamCount;
  std::vector<std::string> blockDevice;  // device of input block i
  std::string stemDevice;
  std::string headDevice;
  std::vector<DevicePlan> devices;  // one per input device, input order
  std::vector<OtherModule> otherModules;
  CachingPlan caching;
  bool fits = true;    // every device within its known budget, caching included
  std::string reason;  // one paragraph: the rule, the split, what is missing

  // Device of a block id ("stem" and "head" included); throws PlacementError when unknown.
  const std::string& deviceOf(const std::string& blockId) const;
};

// Plans `input`. Throws PlacementError when there are no devices or a budget is
// negative, and in memory mode when a budget is unknown (0).
Plan planPlacement(const PlannerInput& input);

// Throws PlacementError with plan.reason when !plan.fits.
void requireFits(const Plan& plan);

// A parameter count for people: "11.90B", "84.0M", "12.3K", "512".
std::string formatParams(int64_t count);

// For `strata-train plan`: a table per device (and the caching phase), then the
// reason; the table alone; the same as JSON.
std::string formatPlan(const Plan& plan);
std::string formatPlanTable(const Plan& plan);
nlohmann::json planToJson(const Plan& plan);

// Budgets for `devices`: each is its cap (device::resolveCaps: one value for all
// GPUs or one per GPU, 0 = none) or else its free memory when `freeBytes` has an
// entry > 0 for it, or else its total, minus `reserveGb`. Throws ConfigError (in
// device terms) when the caps do not resolve or the reserve leaves nothing.
std::vector<DeviceBudget> makeBudgets(const std::vector<device::DeviceInfo>& devices, const std::vector<double>& capGb,
                                      double reserveGb, const std::vector<int64_t>& freeBytes = {});

// ---- costs from shapes (model-agnostic) -----------------------------------

// One Linear that gets a LoRA adapter.
struct LinearShape {
  int64_t inFeatures = 0;
  int64_t outFeatures = 0;
};

// A placement unit described by shapes only: no weights needed.
struct UnitShape {
  std::string id;
  std::string kind;
  int64_t paramCount = 0;
  std::vector<LinearShape> loraLinears;  // the Linears that carry an adapter
  bool isBlock = true;                   // false for stem and head (no block activations)
  // Weight-only quantization (nn/Quantize.h): elements of paramCount stored in
  // quantizedElementBytes instead, and their float32 scales.
  int64_t quantizedWeightCount = 0;
  int64_t quantScaleCount = 0;
  // The largest quantized Linear's weight (in x out): its copy converted to the
  // activation dtype while its matmul runs is the only one alive at a time.
  int64_t largestQuantizedWeightCount = 0;
  // fp8 weights whose transposed copy is kept for the run (model.fp8_keep_transpose):
  // one more byte each, counted with the weights.
  int64_t keptTransposeCount = 0;
};

struct CostOptions {
  int64_t weightElementBytes = 2;       // bf16/fp16 = 2, fp8 (quantized) = 1, fp32 = 4
  int64_t quantizedElementBytes = 1;    // int8 / fp8 weights of quantized Linears
  int64_t quantScaleElementBytes = 4;   // their float32 scales
  int64_t loraRank = 0;                 // 0 = no adapters
  int64_t loraElementBytes = 4;         // LoRA weights: float32 (network.dtype fp32) or bf16 (2)
  bool ema = false;                     // one float32 shadow per trainable weight
  double optimizerBytesPerParam = 8.0;  // AdamW: two float32 moments; adamw8bit: ~2
  int64_t batchSize = 1;
  int64_t tokens = 4608;  // tokens through every block (FLUX 1024px: 4096 image + 512 text)
  int64_t hiddenSize = 3072;
  int64_t activationElementBytes = 2;
  bool gradientCheckpointing = true;
  // train.offload_checkpoints: a checkpointed block's input waits in host memory;
  // on the device only the block being recomputed holds it, and the block recomputed
  // next (in its workspace: two inputs).
  bool offloadCheckpoints = false;
  // train.offload_optimizer_state: the optimizer state waits in host memory; the
  // device holds two staging slots of it during the step (workspace: two of this, or
  // of the largest tensor's moments where those are larger).
  bool offloadOptimizerState = false;
  int64_t optimizerStagingBytes = kOptimizerStagingChunkBytes;
  // Elements of activation kept per token, per hidden unit, by one block when it is
  // not checkpointed (q, k, v, attention, MLP hidden, norms, residuals). 18 matches
  // a FLUX.1-dev step measured with PyTorch: 49.1 GiB peak without checkpointing,
  // 22.2 GiB of it bf16 weights, 57 blocks, 4608 tokens.
  double activationElementsPerTokenPerHidden = 18.0;
};

// Per-unit costs: weights = paramCount x weight bytes (quantized ones at 1 byte plus
// their scales; a quantized Linear converts its weight to the activation dtype for as
// long as its matmul runs, forward or backward, and keeps no copy for the backward
// (nn/Linear.cpp), so the largest one's copy is workspace, checkpointing or not, and
// nothing is kept activation); LoRA r(in+out) per Linear at
// loraElementBytes, its gradient the same, the optimizer state `optimizerBytesPerParam`
// each, EMA 4 bytes each (float32); activations: with checkpointing a block keeps its input (tokens x hidden)
// and needs one block's full activations as workspace while it is recomputed,
// without it keeps the full activations. With offloadCheckpoints the kept input is
// on the host, and the workspace counts two (the recomputed block's, the next one's). With offloadOptimizerState the
// optimizer state is host memory (hostBytes) and the staging chunk is workspace.
BlockCost estimateCost(const UnitShape& unit, const CostOptions& options);

// The whole input, devices and mode left for the caller.
PlannerInput estimateInput(const UnitShape& stem, const std::vector<UnitShape>& blocks, const UnitShape& head,
                           const CostOptions& options);

}  // namespace strata::placement
