#include "models/flux2/Flux2Names.h"

#include <algorithm>

#include "common/Text.h"
#include "models/flux2/Flux2Layout.h"

namespace strata::flux2 {

namespace {

// One BFL name per diffusers module, relative to its unit; fused q/k/v carry their part.
struct Rule {
  const char* diffusers;
  const char* bfl;
  int part;
  int parts;
};

const std::vector<Rule>& rulesOf(FluxUnit unit) {
  static const std::vector<Rule> kStem{
      {"time_guidance_embed.timestep_embedder.linear_1", "time_in.in_layer", 0, 1},
      {"time_guidance_embed.timestep_embedder.linear_2", "time_in.out_layer", 0, 1},
      {"time_guidance_embed.guidance_embedder.linear_1", "guidance_in.in_layer", 0, 1},
      {"time_guidance_embed.guidance_embedder.linear_2", "guidance_in.out_layer", 0, 1},
      {"double_stream_modulation_img.linear", "double_stream_modulation_img.lin", 0, 1},
      {"double_stream_modulation_txt.linear", "double_stream_modulation_txt.lin", 0, 1},
      {"single_stream_modulation.linear", "single_stream_modulation.lin", 0, 1},
      {"x_embedder", "img_in", 0, 1},
      {"context_embedder", "txt_in", 0, 1},
  };
  static const std::vector<Rule> kDouble{
      {"attn.to_q", "img_attn.qkv", 0, 3},
      {"attn.to_k", "img_attn.qkv", 1, 3},
      {"attn.to_v", "img_attn.qkv", 2, 3},
      {"attn.norm_q", "img_attn.norm.query_norm", 0, 1},
      {"attn.norm_k", "img_attn.norm.key_norm", 0, 1},
      {"attn.to_out.0", "img_attn.proj", 0, 1},
      {"attn.norm_added_q", "txt_attn.norm.query_norm", 0, 1},
      {"attn.norm_added_k", "txt_attn.norm.key_norm", 0, 1},
      {"attn.add_q_proj", "txt_attn.qkv", 0, 3},
      {"attn.add_k_proj", "txt_attn.qkv", 1, 3},
      {"attn.add_v_proj", "txt_attn.qkv", 2, 3},
      {"attn.to_add_out", "txt_attn.proj", 0, 1},
      {"ff.linear_in", "img_mlp.0", 0, 1},
      {"ff.linear_out", "img_mlp.2", 0, 1},
      {"ff_context.linear_in", "txt_mlp.0", 0, 1},
      {"ff_context.linear_out", "txt_mlp.2", 0, 1},
  };
  static const std::vector<Rule> kSingle{
      {"attn.to_qkv_mlp_proj", "linear1", 0, 1},
      {"attn.norm_q", "norm.query_norm", 0, 1},
      {"attn.norm_k", "norm.key_norm", 0, 1},
      {"attn.to_out", "linear2", 0, 1},
  };
  static const std::vector<Rule> kHead{
      {"norm_out.linear", "final_layer.adaLN_modulation.1", 0, 1},
      {"proj_out", "final_layer.linear", 0, 1},
  };
  switch (unit) {
    case FluxUnit::Stem:
      return kStem;
    case FluxUnit::Double:
      return kDouble;
    case FluxUnit::Single:
      return kSingle;
    case FluxUnit::Head:
      return kHead;
  }
  return kHead;
}

const Rule* ruleFor(FluxUnit unit, const std::string& path) {
  for (const auto& r : rulesOf(unit))
    if (path == r.diffusers) return &r;
  return nullptr;
}

}  // namespace

Flux2Names::Flux2Names(const Flux2Config& cfg) {
  auto addUnit = [&](FluxUnit unit, const std::string& diffusersPrefix, const std::string& bflPrefix) {
    for (const auto& m : flux2UnitLayout(unit, cfg)) {
      const Rule* r = ruleFor(unit, m.path);
      if (!r) continue;  // every layout module has a rule: Flux2NamesTest checks the map covers the model
      Entry e;
      e.diffusers = diffusersPrefix + m.path;
      e.rmsNorm = m.type == FluxModuleSpec::Type::RmsNorm;
      e.slot.module = bflPrefix + r->bfl;
      e.slot.part = r->part;
      e.slot.parts = r->parts;
      e.slot.rows = m.outFeatures;
      e.slot.rowOffset = static_cast<int64_t>(r->part) * m.outFeatures;
      e.slot.totalRows = static_cast<int64_t>(r->parts) * m.outFeatures;
      e.slot.swapHalves = unit == FluxUnit::Head && m.path == "norm_out.linear";
      byDiffusers_[e.diffusers] = e;
      byBfl_[e.slot.module].emplace_back(e.diffusers, e.slot);
      bflByKohya_[kohyaFromBflModule(e.slot.module)] = e.slot.module;
    }
  };
  addUnit(FluxUnit::Stem, "", "");
  for (int64_t i = 0; i < cfg.numLayers; ++i) {
    const std::string n = std::to_string(i);
    addUnit(FluxUnit::Double, "transformer_blocks." + n + ".", "double_blocks." + n + ".");
  }
  for (int64_t i = 0; i < cfg.numSingleLayers; ++i) {
    const std::string n = std::to_string(i);
    addUnit(FluxUnit::Single, "single_transformer_blocks." + n + ".", "single_blocks." + n + ".");
  }
  addUnit(FluxUnit::Head, "", "");
  // Parts in row order (the layout lists q, k, v in order already; keep it explicit).
  for (auto& [_, parts] : byBfl_)
    std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.second.part < b.second.part; });
}

std::optional<BflSlot> Flux2Names::bflSlotForModule(const std::string& diffusersModule) const {
  const auto it = byDiffusers_.find(diffusersModule);
  if (it == byDiffusers_.end()) return std::nullopt;
  return it->second.slot;
}

std::vector<std::pair<std::string, BflSlot>> Flux2Names::diffusersModulesForBfl(const std::string& bflModule) const {
  const auto it = byBfl_.find(bflModule);
  if (it == byBfl_.end()) return {};
  return it->second;
}

std::optional<Flux2Names::BflParam> Flux2Names::bflParamForKey(const std::string& diffusersKey) const {
  const auto dot = diffusersKey.rfind('.');
  if (dot == std::string::npos || diffusersKey.substr(dot + 1) != "weight") return std::nullopt;  // no biases
  const auto it = byDiffusers_.find(diffusersKey.substr(0, dot));
  if (it == byDiffusers_.end()) return std::nullopt;
  return BflParam{it->second.slot.module + (it->second.rmsNorm ? ".scale" : ".weight"), it->second.slot};
}

std::string Flux2Names::kohyaFromBflModule(const std::string& bflModule) {
  return flux::names::kohyaFromBflModule(bflModule);  // "lora_unet_" + path, '.' -> '_'
}

std::optional<std::string> Flux2Names::bflModuleFromKohya(const std::string& kohyaName) const {
  const auto it = bflByKohya_.find(kohyaName);
  if (it == bflByKohya_.end()) return std::nullopt;
  return it->second;
}

std::string Flux2Names::comfyFromBflModule(const std::string& bflModule) {
  return flux::names::comfyFromBflModule(bflModule);  // "diffusion_model." + path
}

std::optional<std::string> Flux2Names::bflModuleFromComfy(const std::string& comfyName) const {
  for (const std::string& prefix :
       {std::string("model.") + flux::names::kComfyPrefix, std::string(flux::names::kComfyPrefix)}) {
    if (!startsWith(comfyName, prefix)) continue;
    const std::string path = comfyName.substr(prefix.size());
    if (isBflModule(path)) return path;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace strata::flux2
