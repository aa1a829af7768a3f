#include "models/flux2/Flux2LoraRules.h"

#include "common/Text.h"
#include "models/flux2/Flux2Layout.h"

namespace strata::flux2 {

namespace {

constexpr const char* kDiffusersPrefix = "transformer.";
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

Flux2LoraRules::Flux2LoraRules(Flux2Config cfg) : cfg_(std::move(cfg)), names_(cfg_) {
  const auto plan = flux2ParamPlan(cfg_);
  auto add = [&](const flux::FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      linearIndex_[l.path] = linears_.size();
      linears_.push_back({l.path, l.inFeatures, l.outFeatures});
    }
  };
  add(plan.stem);
  for (const auto& b : plan.blocks) add(b);
  add(plan.head);
}

const nn::LoraLinear* Flux2LoraRules::findLinear(const std::string& path) const {
  const auto it = linearIndex_.find(path);
  return it == linearIndex_.end() ? nullptr : &linears_[it->second];
}

std::vector<std::string> Flux2LoraRules::defaultTargets() const {
  return {"re:(transformer_blocks|single_transformer_blocks)\\.[0-9]+\\..+"};
}

std::vector<nn::LoraFileFormat> Flux2LoraRules::formats() const {
  return {nn::LoraFileFormat::Diffusers, nn::LoraFileFormat::Kohya, nn::LoraFileFormat::Comfy};
}

std::optional<nn::LoraSlot> Flux2LoraRules::slotOf(const std::string& modulePath, nn::LoraFileFormat format) const {
  const auto* linear = findLinear(modulePath);
  if (!linear) return std::nullopt;
  if (format == nn::LoraFileFormat::Diffusers) {
    nn::LoraSlot s;
    s.stem = kDiffusersPrefix + modulePath;
    s.rows = s.totalRows = linear->outFeatures;
    return s;
  }
  const auto bfl = names_.bflSlotForModule(modulePath);
  if (!bfl) return std::nullopt;
  return loraSlotOf(*bfl, format == nn::LoraFileFormat::Kohya ? Flux2Names::kohyaFromBflModule(bfl->module)
                                                              : Flux2Names::comfyFromBflModule(bfl->module));
}

std::optional<nn::LoraStemMatch> Flux2LoraRules::matchStem(const std::string& stem) const {
  auto bflMatch = [&](nn::LoraFileFormat format, const std::optional<std::string>& bfl) {
    nn::LoraStemMatch m;
    m.format = format;
    if (!bfl) return m;  // in this form's naming, but no module of the model: the reader names the key
    for (const auto& [path, slot] : names_.diffusersModulesForBfl(*bfl))
      if (findLinear(path)) m.modules.emplace_back(path, loraSlotOf(slot, stem));
    return m;
  };
  if (startsWith(stem, "lora_")) return bflMatch(nn::LoraFileFormat::Kohya, names_.bflModuleFromKohya(stem));
  if (startsWith(stem, flux::names::kComfyPrefix) ||
      startsWith(stem, std::string("model.") + flux::names::kComfyPrefix))
    return bflMatch(nn::LoraFileFormat::Comfy, names_.bflModuleFromComfy(stem));
  if (names_.isBflModule(stem)) return bflMatch(nn::LoraFileFormat::Comfy, stem);  // bare BFL path

  std::string path = stem;
  for (const std::string& prefix : {std::string(kPeftWrapperPrefix), std::string(kDiffusersPrefix)}) {
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

std::map<std::string, std::string> Flux2LoraRules::exportMetadata() const {
  return {{"ss_base_model_version", "flux2"},
          {"modelspec.architecture", "flux-2-dev/lora"},
          {"modelspec.implementation", "https://github.com/black-forest-labs/flux2"}};
}

}  // namespace strata::flux2
