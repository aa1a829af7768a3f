#include "dit/ModuleSpec.h"

namespace strata::dit {

int64_t ModuleSpec::paramCount() const {
  if (type == Type::RmsNorm) return outFeatures;
  return inFeatures * outFeatures + (bias ? outFeatures : 0);
}

const ModuleSpec* findModuleSpec(const std::vector<ModuleSpec>& layout, const std::string& path) {
  for (const auto& m : layout)
    if (m.path == path) return &m;
  return nullptr;
}

std::string blockId(Unit unit, int64_t index) {
  return (unit == Unit::Double ? "transformer_blocks." : "single_transformer_blocks.") + std::to_string(index);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> layoutParams(const UnitLayout& layout, int64_t numLayers,
                                                                       int64_t numSingleLayers) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  auto add = [&out](const std::string& prefix, const std::vector<ModuleSpec>& specs) {
    for (const auto& m : specs) {
      const std::string p = prefix + m.path + ".";
      if (m.type == ModuleSpec::Type::RmsNorm) {
        out.emplace_back(p + "weight", std::vector<int64_t>{m.outFeatures});
        continue;
      }
      out.emplace_back(p + "weight", std::vector<int64_t>{m.outFeatures, m.inFeatures});
      if (m.bias) out.emplace_back(p + "bias", std::vector<int64_t>{m.outFeatures});
    }
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
