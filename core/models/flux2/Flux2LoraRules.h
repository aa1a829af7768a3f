#pragma once
// FLUX.2's LoRA naming for core/lora (nn/LoraNameRules.h), from Flux2Names and the
// layout (Flux2Layout.h). Every Linear of the model can carry an adapter, the
// shared modulation Linears and norm_out.linear included (LoRA files for FLUX.2
// name them). Forms:
//  - diffusers/peft: stem "transformer." + the diffusers module path; read also
//    bare and with peft's "base_model.model.";
//  - kohya: "lora_unet_" + the BFL path with '.' -> '_';
//  - ComfyUI: "diffusion_model." + the BFL path (and "model.diffusion_model.", and a bare BFL path).
// In BFL naming q, k, v of a double-block stream are one module (img_attn.qkv /
// txt_attn.qkv) and final_layer.adaLN_modulation.1 holds norm_out.linear's
// (scale, shift) rows as (shift, scale); core/lora splits and swaps by the slots.
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Names.h"
#include "nn/LoraNameRules.h"

namespace strata::flux2 {

class Flux2LoraRules final : public nn::LoraNameRules {
 public:
  explicit Flux2LoraRules(Flux2Config cfg);

  std::string familyName() const override { return "FLUX.2"; }
  // Every Linear inside the double and single blocks (FLUX.1's default set).
  std::vector<std::string> defaultTargets() const override;
  std::vector<nn::LoraLinear> linears() const override { return linears_; }
  std::vector<nn::LoraFileFormat> formats() const override;
  std::optional<nn::LoraSlot> slotOf(const std::string& modulePath, nn::LoraFileFormat format) const override;
  std::optional<nn::LoraStemMatch> matchStem(const std::string& stem) const override;
  std::string peftMetadataPrefix() const override { return "transformer."; }
  std::map<std::string, std::string> exportMetadata() const override;

  const Flux2Config& config() const { return cfg_; }

 private:
  const nn::LoraLinear* findLinear(const std::string& path) const;

  Flux2Config cfg_;
  Flux2Names names_;
  std::vector<nn::LoraLinear> linears_;
  std::map<std::string, size_t> linearIndex_;
};

}  // namespace strata::flux2
