#pragma once
// FLUX's LoRA naming for core/lora (nn/LoraNameRules.h): the shared BFL LoRA rules
// (dit/BflLoraRules.h) over FLUX.1's plan and name rows (FluxNames.h). BFL fuses
// q, k, v (double_blocks.N.{img,txt}_attn.qkv) and q, k, v, proj_mlp
// (single_blocks.N.linear1) into one module; final_layer.adaLN_modulation.1 holds
// norm_out.linear's (scale, shift) rows as (shift, scale).
#include "dit/BflLoraRules.h"
#include "models/flux/FluxConfig.h"

namespace strata::flux {

class FluxLoraRules final : public dit::BflLoraRules {
 public:
  explicit FluxLoraRules(const FluxConfig& cfg);
};

}  // namespace strata::flux
