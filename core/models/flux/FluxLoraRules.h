#pragma once
// FLUX's LoRA naming for core/lora (nn/LoraNameRules.h), from the name rules in
// FluxNames.h and the layout in FluxLayout.h:
//  - diffusers/peft: stem "transformer." + the diffusers module path; read also
//    without the prefix and with peft's "base_model.model.";
//  - kohya: "lora_unet_" + the BFL path with '.' -> '_' (any "lora_" stem is read
//    as kohya, so a text encoder's "lora_te1_..." is refused by name);
//  - ComfyUI: "diffusion_model." + the BFL path; read also with "model." before it
//    and as a bare BFL path.
// BFL fuses q, k, v (double_blocks.N.{img,txt}_attn.qkv) and q, k, v, proj_mlp
// (single_blocks.N.linear1) into one module; final_layer.adaLN_modulation.1 holds
// norm_out.linear's (scale, shift) rows as (shift, scale).
#include "models/flux/FluxConfig.h"
#include "nn/LoraNameRules.h"

namespace strata::flux {

class FluxLoraRules final : public nn::LoraNameRules {
 public:
  explicit FluxLoraRules(FluxConfig cfg);

  std::string familyName() const override { return "FLUX.1"; }
  // ai-toolkit's FLUX set: every Linear inside the double and single blocks.
  std::vector<std::string> defaultTargets() const override;
  std::vector<nn::LoraLinear> linears() const override { return linears_; }
  std::vector<nn::LoraFileFormat> formats() const override;
  std::optional<nn::LoraSlot> slotOf(const std::string& modulePath, nn::LoraFileFormat format) const override;
  std::optional<nn::LoraStemMatch> matchStem(const std::string& stem) const override;
  std::string peftMetadataPrefix() const override;
  std::map<std::string, std::string> exportMetadata() const override;

  const FluxConfig& config() const { return cfg_; }

 private:
  FluxConfig cfg_;
  std::vector<nn::LoraLinear> linears_;
};

}  // namespace strata::flux
