#include "families/llama/LlamaLoraRules.h"

#include "models/llama/LlamaModuleNames.h"

namespace strata::families {

LlamaLoraRules::LlamaLoraRules(const llama::LlamaConfig& cfg) {
  const auto plan = llama::llamaParamPlan(cfg);
  auto add = [&](const llama::LlamaUnitParams& u) {
    for (const auto& l : u.linears) linears_.push_back({l.path, l.inFeatures, l.outFeatures});
  };
  add(plan.stem);
  for (const auto& b : plan.blocks) add(b);
  add(plan.head);
}

std::vector<std::string> LlamaLoraRules::defaultTargets() const { return llama::peftDefaultTargets(); }

const nn::LoraLinear* LlamaLoraRules::find(const std::string& path) const {
  for (const auto& l : linears_)
    if (l.path == path) return &l;
  return nullptr;
}

std::optional<nn::LoraSlot> LlamaLoraRules::slotOf(const std::string& modulePath, nn::LoraFileFormat format) const {
  const auto* l = find(modulePath);
  if (!l || format != nn::LoraFileFormat::Diffusers) return std::nullopt;
  nn::LoraSlot s;
  s.stem = kPeftPrefix + modulePath;
  s.rows = s.totalRows = l->outFeatures;
  return s;
}

std::optional<nn::LoraStemMatch> LlamaLoraRules::matchStem(const std::string& stem) const {
  const std::string prefix = kPeftPrefix;
  if (stem.rfind(prefix, 0) != 0) return std::nullopt;
  nn::LoraStemMatch m;
  if (const auto* l = find(stem.substr(prefix.size()))) {
    nn::LoraSlot s;
    s.stem = stem;
    s.rows = s.totalRows = l->outFeatures;
    m.modules.emplace_back(l->path, s);
  }
  return m;
}

}  // namespace strata::families
