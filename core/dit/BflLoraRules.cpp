#include "dit/BflLoraRules.h"

#include <algorithm>

#include "common/Text.h"

namespace strata::dit {

namespace {

constexpr const char* kPeftWrapperPrefix = "base_model.model.";

nn::LoraSlot loraSlotOf(const BflSlot& b, std::string stem) {
  nn::LoraSlot s;
  s.stem = std::move(stem);
  s.part = b.part;
  s.parts = b.parts;
  s.rowOffset = b.rowOffset;
  s.rows = b.rows;
  s.totalRows = b.totalRows;
  s.swapHalves = b.swapHalves;
  return s;
}

}  // namespace

BflLoraRules::BflLoraRules(const FluxParamPlan& plan, BflNames names, BflLoraSpec spec)
    : names_(std::move(names)), spec_(std::move(spec)) {
  auto add = [&](const FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      linearIndex_[l.path] = linears_.size();
      linears_.push_back({l.path, l.inFeatures, l.outFeatures});
    }
  };
  add(plan.stem);
  for (const auto& b : plan.blocks) add(b);
  add(plan.head);
}

const nn::LoraLinear* BflLoraRules::findLinear(const std::string& path) const {
  const auto it = linearIndex_.find(path);
  return it == linearIndex_.end() ? nullptr : &linears_[it->second];
}

std::vector<std::string> BflLoraRules::defaultTargets() const {
  return {"re:(transformer_blocks|single_transformer_blocks)\\.[0-9]+\\..+"};
}

std::vector<nn::LoraFileFormat> BflLoraRules::formats() const {
  return {nn::LoraFileFormat::Diffusers, nn::LoraFileFormat::Kohya, nn::LoraFileFormat::Comfy};
}

std::optional<nn::LoraSlot> BflLoraRules::slotOf(const std::string& modulePath, nn::LoraFileFormat format) const {
  const auto* linear = findLinear(modulePath);
  if (format == nn::LoraFileFormat::Diffusers) {
    if (!linear) return std::nullopt;
    nn::LoraSlot s;
    s.stem = kDiffusersLoraPrefix + modulePath;
    s.rows = s.totalRows = linear->outFeatures;
    return s;
  }
  if (!linear && spec_.onlyModelLinears) return std::nullopt;
  const auto bfl = names_.bflSlotForModule(modulePath);
  if (!bfl) return std::nullopt;
  return loraSlotOf(*bfl, format == nn::LoraFileFormat::Kohya ? BflNames::kohyaFromBflModule(bfl->module)
                                                              : BflNames::comfyFromBflModule(bfl->module));
}

std::optional<nn::LoraStemMatch> BflLoraRules::matchStem(const std::string& stem) const {
  auto bflMatch = [&](nn::LoraFileFormat format, const std::optional<std::string>& bfl) {
    nn::LoraStemMatch m;
    m.format = format;
    if (!bfl) return m;  // in this form's naming, but no module of the model: the reader names the key
    for (const auto& [path, slot] : names_.diffusersModulesForBfl(*bfl))
      if (!spec_.onlyModelLinears || findLinear(path)) m.modules.emplace_back(path, loraSlotOf(slot, stem));
    return m;
  };
  if (startsWith(stem, "lora_")) return bflMatch(nn::LoraFileFormat::Kohya, names_.bflModuleFromKohya(stem));
  if (startsWith(stem, kComfyPrefix) || startsWith(stem, std::string("model.") + kComfyPrefix))
    return bflMatch(nn::LoraFileFormat::Comfy, names_.bflModuleFromComfy(stem));
  if (names_.isBflModule(stem)) return bflMatch(nn::LoraFileFormat::Comfy, stem);  // a bare BFL path

  std::string path = stem;
  for (const std::string& prefix : {std::string(kPeftWrapperPrefix), std::string(kDiffusersLoraPrefix)}) {
    if (startsWith(path, prefix)) {
      path = path.substr(prefix.size());
      break;
    }
  }
  nn::LoraStemMatch m;
  m.format = nn::LoraFileFormat::Diffusers;
  if (const auto* linear = findLinear(path)) {
    nn::LoraSlot s;
    s.stem = stem;
    s.rows = s.totalRows = linear->outFeatures;
    m.modules.emplace_back(path, s);
  }
  return m;
}

bool BflLoraRules::foldsAlphaInto(nn::LoraFileFormat format) const {
  return nn::LoraNameRules::foldsAlphaInto(format) ||
         std::find(spec_.alphaFoldedForms.begin(), spec_.alphaFoldedForms.end(), format) !=
             spec_.alphaFoldedForms.end();
}

}  // namespace strata::dit
