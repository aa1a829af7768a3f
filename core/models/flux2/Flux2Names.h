#pragma once
// Every FLUX.2 name rule in one place: diffusers <-> BFL (the flux2 reference
// code's names: img_in, double_blocks.N.img_attn.qkv, single_blocks.N.linear1,
// final_layer.adaLN_modulation.1, ...) for modules and parameters, with the rows a
// diffusers module occupies inside a fused BFL tensor (FLUX.1's names::BflSlot),
// and the LoRA stems of kohya ("lora_unet_" + BFL path, '.' -> '_') and ComfyUI
// ("diffusion_model." + BFL path). Built once per config; pure, no tensors.
//
// What differs from diffusers: q, k, v of each double-block stream are one BFL
// tensor (img_attn.qkv / txt_attn.qkv, stacked on dim 0); RMSNorm weights are
// called "scale"; final_layer.adaLN_modulation.1 holds norm_out.linear's
// (scale, shift) rows as (shift, scale). A single block's linear1 is diffusers'
// to_qkv_mlp_proj as it is (q, k, v, gate, up).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/flux/FluxNames.h"
#include "models/flux2/Flux2Config.h"

namespace strata::flux2 {

using flux::names::BflSlot;

class Flux2Names {
 public:
  explicit Flux2Names(const Flux2Config& cfg);

  // diffusers module path (a Linear or RMSNorm: "transformer_blocks.0.attn.to_k") -> its BFL slot.
  std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule) const;
  // BFL module path -> the diffusers modules it holds, in row order; empty when FLUX.2 has none.
  std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule) const;

  // The same on parameter keys: "transformer_blocks.0.attn.norm_q.weight" ->
  // "double_blocks.0.img_attn.norm.query_norm.scale". nullopt for a key FLUX.2 has not.
  struct BflParam {
    std::string key;
    BflSlot slot;
  };
  std::optional<BflParam> bflParamForKey(const std::string& diffusersKey) const;

  // LoRA stems of a BFL module, and back (nullopt when the name is no FLUX.2 module).
  static std::string kohyaFromBflModule(const std::string& bflModule);
  std::optional<std::string> bflModuleFromKohya(const std::string& kohyaName) const;
  static std::string comfyFromBflModule(const std::string& bflModule);
  // Accepts "diffusion_model." and "model.diffusion_model.".
  std::optional<std::string> bflModuleFromComfy(const std::string& comfyName) const;
  bool isBflModule(const std::string& bflModule) const { return byBfl_.count(bflModule) > 0; }

 private:
  struct Entry {
    std::string diffusers;
    BflSlot slot;
    bool rmsNorm = false;
  };
  std::map<std::string, Entry> byDiffusers_;
  std::map<std::string, std::vector<std::pair<std::string, BflSlot>>> byBfl_;
  std::map<std::string, std::string> bflByKohya_;
};

}  // namespace strata::flux2
