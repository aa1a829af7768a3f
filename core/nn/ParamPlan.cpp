#include "nn/ParamPlan.h"

#include <utility>

namespace strata::nn {

int64_t ModuleSpec::paramCount() const {
  switch (type) {
    case Type::Linear:
      return inFeatures * outFeatures + (bias ? outFeatures : 0);
    case Type::RmsNorm:
      return outFeatures;
    case Type::LayerNorm:
      return 2 * outFeatures;
    case Type::Embedding:
      return inFeatures * outFeatures;
  }
  return 0;
}

const ModuleSpec* findModuleSpec(const std::vector<ModuleSpec>& layout, const std::string& path) {
  for (const auto& m : layout)
    if (m.path == path) return &m;
  return nullptr;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> paramShapes(const std::string& prefix,
                                                                      const std::vector<ModuleSpec>& layout) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& m : layout) {
    const std::string path = prefix + m.path;
    switch (m.type) {
      case ModuleSpec::Type::Linear:
        out.push_back({path + ".weight", {m.outFeatures, m.inFeatures}});
        if (m.bias) out.push_back({path + ".bias", {m.outFeatures}});
        break;
      case ModuleSpec::Type::RmsNorm:
        out.push_back({path + ".weight", {m.outFeatures}});
        break;
      case ModuleSpec::Type::LayerNorm:
        out.push_back({path + ".weight", {m.outFeatures}});
        out.push_back({path + ".bias", {m.outFeatures}});
        break;
      case ModuleSpec::Type::Embedding:
        out.push_back({path + ".weight", {m.inFeatures, m.outFeatures}});
        break;
    }
  }
  return out;
}

UnitPlan planUnit(std::string id, std::string kind, const std::string& prefix, const std::vector<ModuleSpec>& layout) {
  UnitPlan u{std::move(id), std::move(kind), 0, {}};
  for (const auto& m : layout) {
    u.paramCount += m.paramCount();
    if (m.type == ModuleSpec::Type::Linear) u.linears.push_back({prefix + m.path, m.inFeatures, m.outFeatures, m.bias});
  }
  return u;
}

int64_t ParamPlan::totalParams() const {
  int64_t n = stem.paramCount + head.paramCount;
  for (const auto& b : blocks) n += b.paramCount;
  return n;
}

void addBlocks(ParamPlan& plan, const std::string& idPrefix, const std::string& kind, int64_t first, int64_t count,
               const std::vector<ModuleSpec>& layout) {
  for (int64_t i = first; i < first + count; ++i) {
    const std::string id = idPrefix + std::to_string(i);
    plan.blocks.push_back(planUnit(id, kind, id + ".", layout));
  }
}

}  // namespace strata::nn
