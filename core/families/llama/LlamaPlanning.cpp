#include "families/llama/LlamaPlanning.h"

#include <algorithm>

#include "lora/LoraTargets.h"
#include "models/llama/LlamaModuleNames.h"

namespace strata::families {

placement::PlannerInput llamaPlannerInput(const llama::LlamaConfig& cfg, const LlamaPlanOptions& o) {
  const lora::LoraTargets targets(o.loraTargets.empty() ? llama::peftDefaultTargets() : o.loraTargets);
  const llama::LlamaParamPlan params = llama::llamaParamPlan(cfg);
  auto unitOf = [&](const llama::LlamaUnitParams& u) {
    placement::UnitShape s;
    s.id = u.id;
    s.kind = u.kind;
    s.paramCount = u.paramCount;
    s.isBlock = u.kind == "layer";
    for (const auto& l : u.linears) {
      if (targets.matches(l.path)) s.loraLinears.push_back({l.inFeatures, l.outFeatures});
      if (o.quantize && s.isBlock) {
        s.quantizedWeightCount += l.inFeatures * l.outFeatures;
        s.largestQuantizedWeightCount = std::max(s.largestQuantizedWeightCount, l.inFeatures * l.outFeatures);
        s.quantScaleCount += o.perRowScales ? l.outFeatures : 1;
        if (o.keptTransposes && l.inFeatures % 16 == 0 && l.outFeatures % 16 == 0)
          s.keptTransposeCount += l.inFeatures * l.outFeatures;
      }
    }
    return s;
  };
  std::vector<placement::UnitShape> blocks;
  for (const auto& b : params.blocks) blocks.push_back(unitOf(b));

  placement::CostOptions co;
  co.weightElementBytes = o.weightElementBytes;
  co.activationElementBytes = o.activationElementBytes;
  co.loraRank = o.loraRank;
  co.ema = o.ema;
  co.loraElementBytes = o.loraElementBytes;
  co.optimizerBytesPerParam = o.optimizerBytesPerParam;
  co.offloadOptimizerState = o.offloadOptimizerState;
  co.batchSize = o.batchSize;
  co.tokens = o.seqLen;
  co.hiddenSize = cfg.hiddenSize;
  co.gradientCheckpointing = o.gradientCheckpointing;
  co.activationElementsPerTokenPerHidden = llama::llamaActivationElementsPerTokenPerHidden(cfg);
  placement::PlannerInput in = placement::estimateInput(unitOf(params.stem), blocks, unitOf(params.head), co);
  in.mode = placement::PlanMode::Memory;
  // No other modules: a causal LM has no text encoder or VAE beside it (otherModules stays empty).
  const int64_t logits = o.batchSize * o.seqLen * cfg.vocabSize;
  in.head.activationBytes += logits * 4;
  in.head.workspaceBytes += logits * (o.activationElementBytes + 4);
  return in;
}

}  // namespace strata::families
