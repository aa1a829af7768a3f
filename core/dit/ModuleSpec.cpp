#include "dit/ModuleSpec.h"

namespace strata::dit {

std::string blockId(Unit unit, int64_t index) {
  return (unit == Unit::Double ? "transformer_blocks." : "single_transformer_blocks.") + std::to_string(index);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> layoutParams(const UnitLayout& layout, int64_t numLayers,
                                                                       int64_t numSingleLayers) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  auto add = [&out](const std::string& prefix, const std::vector<ModuleSpec>& specs) {
    for (auto& entry : nn::paramShapes(prefix, specs)) out.push_back(std::move(entry));
  };
  add("", layout(Unit::Stem));
  const auto doubleLayout = layout(Unit::Double);
  for (int64_t i = 0; i < numLayers; ++i) add(blockId(Unit::Double, i) + ".", doubleLayout);
  const auto singleLayout = layout(Unit::Single);
  for (int64_t i = 0; i < numSingleLayers; ++i) add(blockId(Unit::Single, i) + ".", singleLayout);
  add("", layout(Unit::Head));
  return out;
}

}  // namespace strata::dit
