#include "models/flux/FluxNames.h"

#include "models/flux/FluxLayout.h"

namespace strata::flux::names {

namespace {

// One row per diffusers module: its BFL module inside a block ("transformer_blocks.N."
// <-> "double_blocks.N.") or at the top level. Rows that share a BFL module are its
// fused parts, in row order by `part`; the rows themselves come from the layout.
const dit::BflRows& fluxRows() {
  static const dit::BflRows rows{
      // top: stem and head
      {
          {"x_embedder", "img_in"},
          {"context_embedder", "txt_in"},
          {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer"},
          {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer"},
          {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
          {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
          {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer"},
          {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer"},
          {"norm_out.linear", "final_layer.adaLN_modulation.1", 0, false, true},
          {"proj_out", "final_layer.linear"},
      },
      // double blocks
      {
          {"norm1.linear", "img_mod.lin"},
          {"norm1_context.linear", "txt_mod.lin"},
          {"attn.to_q", "img_attn.qkv", 0},
          {"attn.to_k", "img_attn.qkv", 1},
          {"attn.to_v", "img_attn.qkv", 2},
          {"attn.add_q_proj", "txt_attn.qkv", 0},
          {"attn.add_k_proj", "txt_attn.qkv", 1},
          {"attn.add_v_proj", "txt_attn.qkv", 2},
          {"attn.norm_q", "img_attn.norm.query_norm", 0, true},
          {"attn.norm_k", "img_attn.norm.key_norm", 0, true},
          {"attn.norm_added_q", "txt_attn.norm.query_norm", 0, true},
          {"attn.norm_added_k", "txt_attn.norm.key_norm", 0, true},
          {"attn.to_out.0", "img_attn.proj"},
          {"attn.to_add_out", "txt_attn.proj"},
          {"ff.net.0.proj", "img_mlp.0"},
          {"ff.net.2", "img_mlp.2"},
          {"ff_context.net.0.proj", "txt_mlp.0"},
          {"ff_context.net.2", "txt_mlp.2"},
      },
      // single blocks
      {
          {"norm.linear", "modulation.lin"},
          {"attn.to_q", "linear1", 0},
          {"attn.to_k", "linear1", 1},
          {"attn.to_v", "linear1", 2},
          {"proj_mlp", "linear1", 3},
          {"attn.norm_q", "norm.query_norm", 0, true},
          {"attn.norm_k", "norm.key_norm", 0, true},
          {"proj_out", "linear2"},
      },
  };
  return rows;
}

// The rows alone, for the name functions that need no config.
const dit::BflNames& anyConfig() {
  static const dit::BflNames n = bflNames(FluxConfig::tiny());
  return n;
}

}  // namespace

dit::BflNames bflNames(const FluxConfig& cfg) {
  return dit::BflNames(fluxRows(), fluxLayout(cfg), cfg.numLayers, cfg.numSingleLayers, /*bounded=*/false);
}

std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule, const FluxConfig& cfg) {
  return bflNames(cfg).bflSlotForModule(diffusersModule);
}

std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule,
                                                                    const FluxConfig& cfg) {
  return bflNames(cfg).diffusersModulesForBfl(bflModule);
}

std::optional<BflParam> bflParamForKey(const std::string& diffusersKey, const FluxConfig& cfg) {
  return bflNames(cfg).bflParamForKey(diffusersKey);
}

std::vector<std::pair<std::string, BflSlot>> diffusersKeysForBflKey(const std::string& bflKey, const FluxConfig& cfg) {
  return bflNames(cfg).diffusersKeysForBflKey(bflKey);
}

bool isBflModule(const std::string& bflModule) { return anyConfig().isBflModule(bflModule); }

std::string kohyaFromBflModule(const std::string& bflModule) { return dit::BflNames::kohyaFromBflModule(bflModule); }

std::optional<std::string> bflModuleFromKohya(const std::string& kohyaName) {
  return anyConfig().bflModuleFromKohya(kohyaName);
}

std::string comfyFromBflModule(const std::string& bflModule) { return dit::BflNames::comfyFromBflModule(bflModule); }

std::optional<std::string> bflModuleFromComfy(const std::string& comfyName) {
  return anyConfig().bflModuleFromComfy(comfyName);
}

}  // namespace strata::flux::names
