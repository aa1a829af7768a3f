#include "train/RunPlanning.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "lora/LoraTargets.h"
#include "models/flux/FluxLoraRules.h"
#include "train/Datasets.h"

namespace strata::train {

flux::FluxConfig withShapeOverrides(flux::FluxConfig c, const config::ModelConfig& m) {
  if (m.numLayers) c.numLayers = *m.numLayers;
  if (m.numSingleLayers) c.numSingleLayers = *m.numSingleLayers;
  if (m.numAttentionHeads) c.numAttentionHeads = *m.numAttentionHeads;
  if (m.attentionHeadDim) c.attentionHeadDim = *m.attentionHeadDim;
  if (m.inChannels) c.inChannels = c.outChannels = *m.inChannels;
  if (m.jointAttentionDim) c.jointAttentionDim = *m.jointAttentionDim;
  if (m.pooledProjectionDim) c.pooledProjectionDim = *m.pooledProjectionDim;
  if (!m.axesDimsRope.empty()) c.axesDimsRope = m.axesDimsRope;
  if (m.guidanceEmbeds) c.guidanceEmbeds = *m.guidanceEmbeds;
  c.validate();
  return c;
}

flux::FluxConfig planFluxConfig(const config::ModelConfig& m, std::string* source) {
  std::string from;
  flux::FluxConfig c;
  if (m.preset == config::ModelPreset::Tiny) {
    c = flux::FluxConfig::tiny();
    from = "preset tiny";
  } else if (m.preset == config::ModelPreset::FluxDev || m.randomWeights || m.nameOrPath.empty()) {
    c = flux::FluxConfig::fluxDev();
    from = "preset flux-dev";
  } else if (std::filesystem::exists(m.nameOrPath)) {
    c = flux::FluxConfig::fromCheckpoint(m.nameOrPath, m.axesDimsRope);
    from = "shapes of " + m.nameOrPath + " (headers only)";
  } else {
    c = flux::FluxConfig::fluxDev();
    from = "preset flux-dev (" + m.nameOrPath + " not found here)";
  }
  if (source) *source = from;
  return withShapeOverrides(c, m);
}

int64_t planTokens(const config::RunConfig& cfg, const flux::FluxConfig& fc) {
  int64_t px = 0;
  for (const auto& d : cfg.datasets)
    for (int64_t r : d.resolution) px = std::max(px, r);
  if (px == 0) px = 512;
  const bool pixelCode = !cfg.datasets.empty() && cfg.datasets.front().type == config::DatasetType::Shapes;
  const int64_t latent = px / (pixelCode ? kPixelCodeScale : 8);
  return (latent / 2) * (latent / 2) + defaultTextTokens(fc.jointAttentionDim);
}

RunPlanInput runPlanInput(const config::RunConfig& cfg, const flux::FluxConfig& fc, int64_t tokens) {
  const lora::LoraTargets targets(cfg.network.targetModules.empty() ? flux::FluxLoraRules(fc).defaultTargets()
                                                                    : cfg.network.targetModules);
  RunPlanInput out;
  auto unitOf = [&](const flux::FluxBlockParams& b) {
    placement::UnitShape u;
    u.id = b.id;
    u.kind = b.kind;
    u.paramCount = b.paramCount;
    u.isBlock = b.kind != "stem" && b.kind != "head";
    for (const auto& l : b.linears)
      if (targets.matches(l.path)) u.loraLinears.push_back({l.inFeatures, l.outFeatures});
    out.adapters[b.id] = static_cast<int>(u.loraLinears.size());
    return u;
  };
  const flux::FluxParamPlan params = flux::fluxParamPlan(fc);
  std::vector<placement::UnitShape> blocks;
  for (const auto& b : params.blocks) blocks.push_back(unitOf(b));

  // Weights and activations in train.dtype (Strata does not quantize yet).
  const int64_t elementBytes = cfg.train.dtype == config::DType::FP32 ? 4 : 2;
  placement::CostOptions co;
  co.weightElementBytes = elementBytes;
  co.activationElementBytes = elementBytes;
  co.loraRank = cfg.network.linear;
  co.ema = cfg.train.ema.useEma;
  co.batchSize = cfg.train.batchSize;
  co.tokens = tokens;
  co.hiddenSize = fc.hiddenSize();
  co.gradientCheckpointing = cfg.train.gradientCheckpointing;
  out.input = placement::estimateInput(unitOf(params.stem), blocks, unitOf(params.head), co);
  out.input.mode = cfg.model.placement == config::PlacementMode::Memory ? placement::PlanMode::Memory
                                                                         : placement::PlanMode::ParamCount;
  out.input.otherModuleParamCountScale = cfg.model.splitModelOtherModuleParamCountScale;
  return out;
}

}  // namespace strata::train
