#pragma once
// Every FLUX name rule in one place: diffusers <-> BFL module and parameter
// names (with the slot a diffusers module occupies inside a fused BFL tensor),
// and the LoRA key prefixes of kohya ("lora_unet_" + BFL path, '.' -> '_') and
// ComfyUI ("diffusion_model." + BFL path). Pure string functions, no tensors.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/flux/FluxConfig.h"

namespace strata::flux::names {

// Where a diffusers module's rows live inside a BFL tensor (dim 0 of weight and bias).
struct BflSlot {
  std::string module;       // BFL module path, "double_blocks.0.img_attn.qkv"
  int part = 0;             // index among the fused parts: q 0, k 1, v 2, mlp 3
  int parts = 1;            // number of fused parts; 1 = the whole tensor
  int64_t rowOffset = 0;    // first row of this part in the BFL tensor
  int64_t rows = 0;         // rows of the diffusers tensor
  int64_t totalRows = 0;    // rows of the whole BFL tensor
  bool swapHalves = false;  // norm_out.linear (scale, shift) = final_layer.adaLN_modulation.1 (shift, scale)
  bool fused() const { return parts > 1; }
};

// diffusers module path ("transformer_blocks.0.attn.to_k") -> its BFL slot
// (double_blocks.0.img_attn.qkv, part 1 of 3). nullopt when FLUX has no such module.
std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule, const FluxConfig& cfg);

// BFL module path -> the diffusers modules it holds, in row order (one unless fused).
// Empty when FLUX has no such module.
std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule,
                                                                    const FluxConfig& cfg);

// The same on parameter keys: "transformer_blocks.0.attn.norm_q.weight" <->
// "double_blocks.0.img_attn.norm.query_norm.scale" (RMSNorm weight <-> scale).
struct BflParam {
  std::string key;  // BFL parameter key
  BflSlot slot;
};
std::optional<BflParam> bflParamForKey(const std::string& diffusersKey, const FluxConfig& cfg);
std::vector<std::pair<std::string, BflSlot>> diffusersKeysForBflKey(const std::string& bflKey, const FluxConfig& cfg);

// kohya LoRA module name of a BFL module: "lora_unet_double_blocks_0_img_attn_qkv".
std::string kohyaFromBflModule(const std::string& bflModule);
// Back to the BFL path; nullopt when the name is not a FLUX module.
std::optional<std::string> bflModuleFromKohya(const std::string& kohyaName);

// ComfyUI LoRA module name: "diffusion_model.double_blocks.0.img_attn.qkv".
std::string comfyFromBflModule(const std::string& bflModule);
// Accepts "diffusion_model." and "model.diffusion_model." prefixes; nullopt otherwise
// or when the path is not a FLUX module.
std::optional<std::string> bflModuleFromComfy(const std::string& comfyName);

// True when `bflModule` is a module FLUX has (any config): "double_blocks.7.img_attn.qkv".
bool isBflModule(const std::string& bflModule);

// Prefix of diffusers/peft LoRA keys: "transformer.".
inline constexpr const char* kDiffusersLoraPrefix = "transformer.";
inline constexpr const char* kKohyaPrefix = "lora_unet_";
inline constexpr const char* kComfyPrefix = "diffusion_model.";

}  // namespace strata::flux::names
