#include "models/flux/FluxLoraRules.h"

#include <algorithm>

#include "common/Text.h"
#include "models/flux/FluxNames.h"

namespace strata::flux {

namespace {

constexpr const char* kPeftWrapperPrefix = "base_model.model.";

nn::LoraSlot loraSlotOf(const names::BflSlot& b, std::string stem) {
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

FluxLoraRules::FluxLoraRules(FluxConfig cfg) : cfg_(std::move(cfg)) {
  const auto plan = fluxParamPlan(cfg_);
  auto add = [&](const FluxBlockParams& b) {
    for (const auto& l : b.linears) linears_.push_back({l.path, l.inFeatures, l.outFeatures});
  };
  add(plan.stem);
  for (const auto& b : plan.blocks) add(b);
  add(plan.head);
}

std::vector<std::string> FluxLoraRules::defaultTargets() const {
  return {"re:(transformer_blocks|single_transformer_blocks)\\.[0-9]+\\..+"};
}

std::vector<nn::LoraFileFormat> FluxLoraRules::formats() const {
  return {nn::LoraFileFormat::Diffusers, nn::LoraFileFormat::Kohya, nn::LoraFileFormat::Comfy};
}

std::optional<nn::LoraSlot> FluxLoraRules::slotOf(const std::string& modulePath, nn::LoraFileFormat format) const {
  if (format == nn::LoraFileFormat::Diffusers) {
    const auto it = std::find_if(linears_.begin(), linears_.end(), [&](const auto& l) { return l.path == modulePath; });
    if (it == linears_.end()) return std::nullopt;
    nn::LoraSlot s;
    s.stem = names::kDiffusersLoraPrefix + modulePath;
    s.rows = s.totalRows = it->outFeatures;
    return s;
  }
  const auto bfl = names::bflSlotForModule(modulePath, cfg_);
  if (!bfl) return std::nullopt;
  return loraSlotOf(*bfl, format == nn::LoraFileFormat::Kohya ? names::kohyaFromBflModule(bfl->module)
                                                              : names::comfyFromBflModule(bfl->module));
}

std::optional<nn::LoraStemMatch> FluxLoraRules::matchStem(const std::string& stem) const {
  auto bflMatch = [&](nn::LoraFileFormat format, const std::optional<std::string>& bfl) {
    nn::LoraStemMatch m;
    m.format = format;
    if (!bfl) return m;
    for (const auto& [path, slot] : names::diffusersModulesForBfl(*bfl, cfg_))
      m.modules.emplace_back(path, loraSlotOf(slot, stem));
    return m;
  };
  if (startsWith(stem, names::kKohyaPrefix) || startsWith(stem, "lora_"))
    return bflMatch(nn::LoraFileFormat::Kohya, names::bflModuleFromKohya(stem));
  if (startsWith(stem, names::kComfyPrefix) || startsWith(stem, std::string("model.") + names::kComfyPrefix))
    return bflMatch(nn::LoraFileFormat::Comfy, names::bflModuleFromComfy(stem));
  if (names::isBflModule(stem)) return bflMatch(nn::LoraFileFormat::Comfy, stem);  // BFL names without ComfyUI's prefix

  std::string path = stem;
  for (const std::string& prefix : {std::string(kPeftWrapperPrefix), std::string(names::kDiffusersLoraPrefix)}) {
    if (startsWith(path, prefix)) {
      path = path.substr(prefix.size());
      break;
    }
  }
  nn::LoraStemMatch m;
  m.format = nn::LoraFileFormat::Diffusers;
  const auto it = std::find_if(linears_.begin(), linears_.end(), [&](const auto& l) { return l.path == path; });
  if (it != linears_.end()) {
    nn::LoraSlot s;
    s.stem = stem;
    s.rows = s.totalRows = it->outFeatures;
    m.modules.emplace_back(path, s);
  }
  return m;
}

std::string FluxLoraRules::peftMetadataPrefix() const { return names::kDiffusersLoraPrefix; }

std::map<std::string, std::string> FluxLoraRules::exportMetadata() const {
  return {{"ss_network_module", "networks.lora_flux"},
          {"ss_base_model_version", "flux1"},
          {"modelspec.architecture", "flux-1-dev/lora"},
          {"modelspec.implementation", "https://github.com/black-forest-labs/flux"}};
}

}  // namespace strata::flux
