#include "dit/ParamPlan.h"

namespace strata::dit {

bool isModulationLinear(const std::string& path) {
  auto endsWith = [&](const std::string& tail) {
    return path.size() >= tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
  };
  return endsWith("norm1.linear") || endsWith("norm1_context.linear") || endsWith("norm.linear") ||
         endsWith("norm_out.linear");
}

FluxParamPlan paramPlanOf(const UnitLayout& layout, int64_t numLayers, int64_t numSingleLayers) {
  FluxParamPlan plan;
  plan.stem = nn::planUnit("stem", "stem", "", layout(Unit::Stem));
  nn::addBlocks(plan, "transformer_blocks.", "double", 0, numLayers, layout(Unit::Double));
  nn::addBlocks(plan, "single_transformer_blocks.", "single", 0, numSingleLayers, layout(Unit::Single));
  plan.head = nn::planUnit("head", "head", "", layout(Unit::Head));
  return plan;
}

double trainStepFlops(const FluxParamPlan& plan, int64_t hiddenSize, int64_t batch, int64_t imageTokens,
                      int64_t textTokens, int64_t loraRank, const std::function<bool(const std::string&)>& perSample,
                      const std::function<bool(const std::string&)>& hasLora) {
  auto contains = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  auto tokensOf = [&](const std::string& path) -> double {
    if (perSample(path)) return 1;
    if (path.rfind("single_transformer_blocks.", 0) == 0) return static_cast<double>(imageTokens + textTokens);
    if (contains(path, "context_embedder") || contains(path, "add_q_proj") || contains(path, "add_k_proj") ||
        contains(path, "add_v_proj") || contains(path, "to_add_out") || contains(path, "ff_context"))
      return static_cast<double>(textTokens);
    return static_cast<double>(imageTokens);
  };
  double flops = 0;
  auto addUnit = [&](const FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      const double n = tokensOf(l.path) * static_cast<double>(batch);
      flops += 4.0 * n * static_cast<double>(l.inFeatures) * static_cast<double>(l.outFeatures);
      if (loraRank > 0 && hasLora && hasLora(l.path))
        flops += 6.0 * n * static_cast<double>(loraRank) * static_cast<double>(l.inFeatures + l.outFeatures);
    }
  };
  addUnit(plan.stem);
  for (const auto& b : plan.blocks) addUnit(b);
  addUnit(plan.head);
  const double seq = static_cast<double>(imageTokens + textTokens);
  flops += 12.0 * static_cast<double>(batch) * seq * seq * static_cast<double>(hiddenSize) *
           static_cast<double>(plan.blocks.size());
  return flops;
}

}  // namespace strata::dit
