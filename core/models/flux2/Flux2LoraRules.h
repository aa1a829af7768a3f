#pragma once
// FLUX.2's LoRA naming for core/lora (nn/LoraNameRules.h): the shared BFL LoRA rules
// (dit/BflLoraRules.h) over FLUX.2's plan and name rows (Flux2Names). Every Linear of
// the model can carry an adapter, the shared modulation Linears and norm_out.linear
// included (LoRA files for FLUX.2 name them). In BFL naming q, k, v of a double-block
// stream are one module (img_attn.qkv / txt_attn.qkv) and final_layer.adaLN_modulation.1
// holds norm_out.linear's (scale, shift) rows as (shift, scale); core/lora splits and
// swaps by the slots.
#include "dit/BflLoraRules.h"
#include "models/flux2/Flux2Config.h"

namespace strata::flux2 {

class Flux2LoraRules final : public dit::BflLoraRules {
 public:
  explicit Flux2LoraRules(const Flux2Config& cfg);
};

}  // namespace strata::flux2
