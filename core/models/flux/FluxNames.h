#pragma once
// FLUX.1's name rows for the shared BFL name engine (dit/BflNames.h): diffusers <->
// BFL module and parameter names (with the slot a diffusers module occupies inside
// a fused BFL tensor), and the LoRA key prefixes of kohya ("lora_unet_" + BFL path,
// '.' -> '_') and ComfyUI ("diffusion_model." + BFL path). FLUX.1's names take any
// block index. Pure string functions, no tensors.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dit/BflNames.h"
#include "models/flux/FluxConfig.h"

namespace strata::flux::names {

using dit::BflParam;
using dit::BflSlot;
using dit::kComfyPrefix;
using dit::kDiffusersLoraPrefix;
using dit::kKohyaPrefix;

// The engine over FLUX.1's rows for `cfg` (the rows of fused parts from its layout).
dit::BflNames bflNames(const FluxConfig& cfg);

// diffusers module path ("transformer_blocks.0.attn.to_k") -> its BFL slot
// (double_blocks.0.img_attn.qkv, part 1 of 3). nullopt when FLUX has no such module.
std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule, const FluxConfig& cfg);

// BFL module path -> the diffusers modules it holds, in row order (one unless fused).
// Empty when FLUX has no such module.
std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule,
                                                                    const FluxConfig& cfg);

// The same on parameter keys: "transformer_blocks.0.attn.norm_q.weight" <->
// "double_blocks.0.img_attn.norm.query_norm.scale" (RMSNorm weight <-> scale).
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

}  // namespace strata::flux::names
