#pragma once
// Planning and export pieces the image families share (FLUX.1 and FLUX.2 today):
// the planner's per-unit input from a parameter plan, and the LoRA file's form
// and options of an export.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "lora/LoraFormats.h"
#include "lora/LoraTargets.h"
#include "placement/Planner.h"
#include "train/AdamW8bit.h"
#include "train/RunPlanning.h"
#include "train/TrainerSupport.h"

namespace strata::diffusion {

// Per-unit parameters and LoRA-targeted Linears (network.target_modules, else
// `defaultTargets`), the cost options of the config (dtype, rank, EMA, batch,
// checkpointing), the placement mode and ai-toolkit's other-module scale (the
// other modules themselves depend on the first device: prepareRun adds them).
// `params`: a model's parameter plan, stem / blocks / head units, each with id,
// kind, paramCount and linears {path, inFeatures, outFeatures}.
// `activationElementsPerTokenPerHidden`: what one block keeps per token per
// hidden unit without checkpointing (placement::CostOptions). `isModulationLinear`:
// whether a Linear reads the conditioning vector (one token per sample; it keeps
// no fp8 transpose while no time embedder Linear trains).
template <class ParamPlan>
train::RunPlanInput runPlanInput(const config::RunConfig& cfg, const ParamPlan& params, int64_t hiddenSize,
                                 const std::vector<std::string>& defaultTargets, int64_t tokens,
                                 double activationElementsPerTokenPerHidden,
                                 const std::function<bool(const std::string& path)>& isModulationLinear) {
  const lora::LoraTargets targets(cfg.network.targetModules.empty() ? defaultTargets : cfg.network.targetModules);
  train::RunPlanInput out;
  // model.fp8_keep_transpose: the fp8 Linears whose input gets a gradient keep a transposed
  // copy (nn::Fp8Backward). The modulations read the conditioning vector, which gets a
  // gradient only when a time_text_embed Linear trains. An upper bound by the first double
  // block's q/k/v (their input comes from the frozen stem).
  const bool keptTransposes = train::keepsFp8Transposes(cfg.model);
  bool conditioningTrains = false;
  for (const auto& l : params.stem.linears)
    conditioningTrains = conditioningTrains || (l.path.rfind("time_text_embed", 0) == 0 && targets.matches(l.path));
  auto unitOf = [&](const auto& b) {
    placement::UnitShape u;
    u.id = b.id;
    u.kind = b.kind;
    u.paramCount = b.paramCount;
    u.isBlock = b.kind != "stem" && b.kind != "head";
    for (const auto& l : b.linears)
      if (targets.matches(l.path)) u.loraLinears.push_back({l.inFeatures, l.outFeatures});
    out.adapters[b.id] = static_cast<int>(u.loraLinears.size());
    // Only the blocks' Linears are quantized (stem and head stay in train.dtype).
    if (cfg.model.quantize && u.isBlock)
      for (const auto& l : b.linears) {
        u.quantizedWeightCount += l.inFeatures * l.outFeatures;
        u.largestQuantizedWeightCount = std::max(u.largestQuantizedWeightCount, l.inFeatures * l.outFeatures);
        u.quantScaleCount += cfg.model.qtype == "int8" || cfg.model.qtype == "qfloat8" ? l.outFeatures : 1;
        if (keptTransposes && l.inFeatures % 16 == 0 && l.outFeatures % 16 == 0 &&
            (conditioningTrains || !isModulationLinear(l.path)))
          u.keptTransposeCount += l.inFeatures * l.outFeatures;
      }
    return u;
  };
  std::vector<placement::UnitShape> blocks;
  for (const auto& b : params.blocks) blocks.push_back(unitOf(b));

  // Weights and activations in train.dtype; quantized block Linears counted by unitOf.
  placement::CostOptions co;
  co.weightElementBytes = config::elementBytes(cfg.train.dtype);
  co.activationElementBytes = co.weightElementBytes;
  co.loraRank = cfg.network.linear;
  co.ema = cfg.train.ema.useEma;
  co.loraElementBytes = config::elementBytes(cfg.network.dtype);
  co.optimizerBytesPerParam =
      train::optimizerStateBytesPerParam(cfg.train.optimizer == config::OptimizerType::AdamW8bit, co.loraElementBytes);
  co.batchSize = cfg.train.batchSize;
  co.tokens = tokens;
  co.hiddenSize = hiddenSize;
  co.gradientCheckpointing = cfg.train.gradientCheckpointing;
  co.offloadCheckpoints = cfg.train.gradientCheckpointing && cfg.train.offloadCheckpoints;
  co.offloadOptimizerState = cfg.train.offloadOptimizerState;
  co.activationElementsPerTokenPerHidden = activationElementsPerTokenPerHidden;
  out.input = placement::estimateInput(unitOf(params.stem), blocks, unitOf(params.head), co);
  out.input.mode = cfg.model.placement == config::PlacementMode::Memory ? placement::PlanMode::Memory
                                                                        : placement::PlanMode::ParamCount;
  out.input.otherModuleParamCountScale = cfg.model.splitModelOtherModuleParamCountScale;
  return out;
}

// The LoRA file's form of an export format (peft: the diffusers / peft tensor
// names; the families refuse it first, by formatProblem).
lora::LoraFileFormat loraFileFormatOf(config::ExportFormat format);

// The LoRA file's options and metadata for a run (`runYaml` empty: written from
// cfg); `baseModel` names the model in the metadata.
lora::LoraExportOptions loraExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                          double alpha, const std::string& runYaml, const std::string& softwareVersion,
                                          const std::string& baseModel);

}  // namespace strata::diffusion
