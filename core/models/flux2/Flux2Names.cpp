#include "models/flux2/Flux2Names.h"

#include "models/flux2/Flux2Layout.h"

namespace strata::flux2 {

namespace {

// One BFL name per diffusers module, relative to its unit; fused q/k/v carry their part.
const dit::BflRows& flux2Rows() {
  static const dit::BflRows rows{
      // top: stem and head
      {
          {"time_guidance_embed.timestep_embedder.linear_1", "time_in.in_layer"},
          {"time_guidance_embed.timestep_embedder.linear_2", "time_in.out_layer"},
          {"time_guidance_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
          {"time_guidance_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
          {"double_stream_modulation_img.linear", "double_stream_modulation_img.lin"},
          {"double_stream_modulation_txt.linear", "double_stream_modulation_txt.lin"},
          {"single_stream_modulation.linear", "single_stream_modulation.lin"},
          {"x_embedder", "img_in"},
          {"context_embedder", "txt_in"},
          {"norm_out.linear", "final_layer.adaLN_modulation.1", 0, false, true},
          {"proj_out", "final_layer.linear"},
      },
      // double blocks
      {
          {"attn.to_q", "img_attn.qkv", 0},
          {"attn.to_k", "img_attn.qkv", 1},
          {"attn.to_v", "img_attn.qkv", 2},
          {"attn.norm_q", "img_attn.norm.query_norm", 0, true},
          {"attn.norm_k", "img_attn.norm.key_norm", 0, true},
          {"attn.to_out.0", "img_attn.proj"},
          {"attn.norm_added_q", "txt_attn.norm.query_norm", 0, true},
          {"attn.norm_added_k", "txt_attn.norm.key_norm", 0, true},
          {"attn.add_q_proj", "txt_attn.qkv", 0},
          {"attn.add_k_proj", "txt_attn.qkv", 1},
          {"attn.add_v_proj", "txt_attn.qkv", 2},
          {"attn.to_add_out", "txt_attn.proj"},
          {"ff.linear_in", "img_mlp.0"},
          {"ff.linear_out", "img_mlp.2"},
          {"ff_context.linear_in", "txt_mlp.0"},
          {"ff_context.linear_out", "txt_mlp.2"},
      },
      // single blocks
      {
          {"attn.to_qkv_mlp_proj", "linear1"},
          {"attn.norm_q", "norm.query_norm", 0, true},
          {"attn.norm_k", "norm.key_norm", 0, true},
          {"attn.to_out", "linear2"},
      },
  };
  return rows;
}

}  // namespace

Flux2Names::Flux2Names(const Flux2Config& cfg)
    : dit::BflNames(flux2Rows(), flux2Layout(cfg), cfg.numLayers, cfg.numSingleLayers, /*bounded=*/true) {}

}  // namespace strata::flux2
