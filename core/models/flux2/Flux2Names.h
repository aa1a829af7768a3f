#pragma once
// FLUX.2's name rows for the shared BFL name engine (dit/BflNames.h): diffusers <->
// BFL (the flux2 reference code's names: img_in, double_blocks.N.img_attn.qkv,
// single_blocks.N.linear1, final_layer.adaLN_modulation.1, ...) for modules and
// parameters, with the rows a diffusers module occupies inside a fused BFL tensor,
// and the LoRA stems of kohya ("lora_unet_" + BFL path, '.' -> '_') and ComfyUI
// ("diffusion_model." + BFL path). Only the modules of the config's model resolve.
//
// What differs from diffusers: q, k, v of each double-block stream are one BFL
// tensor (img_attn.qkv / txt_attn.qkv, stacked on dim 0); RMSNorm weights are
// called "scale"; final_layer.adaLN_modulation.1 holds norm_out.linear's
// (scale, shift) rows as (shift, scale). A single block's linear1 is diffusers'
// to_qkv_mlp_proj as it is (q, k, v, gate, up).
#include "dit/BflNames.h"
#include "models/flux2/Flux2Config.h"

namespace strata::flux2 {

using dit::BflSlot;

class Flux2Names : public dit::BflNames {
 public:
  explicit Flux2Names(const Flux2Config& cfg);
};

}  // namespace strata::flux2
