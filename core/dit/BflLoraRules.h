#pragma once
// The LoRA naming (nn/LoraNameRules.h) of a DiT with BFL names, FLUX.1's and
// FLUX.2's, driven by the model's plan (its Linears) and its BflNames:
//  - diffusers/peft: stem "transformer." + the diffusers module path; read also
//    without the prefix and with peft's "base_model.model.";
//  - kohya: "lora_unet_" + the BFL path with '.' -> '_' (any "lora_" stem is read
//    as kohya, so a text encoder's "lora_te1_..." is refused by name);
//  - ComfyUI: "diffusion_model." + the BFL path; read also with "model." before it
//    and as a bare BFL path.
// Fused BFL modules (q, k, v; a single block's linear1) and the final layer's
// swapped modulation halves are the slots' business: core/lora splits and swaps.
#include <map>
#include <string>
#include <vector>

#include "dit/BflNames.h"
#include "dit/ParamPlan.h"
#include "nn/LoraNameRules.h"

namespace strata::dit {

struct BflLoraSpec {
  std::string familyName;                       // "FLUX.1"
  std::map<std::string, std::string> metadata;  // exportMetadata()
  // Whether BFL names resolve only to the model's Linears (FLUX.2), or to every
  // module of the name rows (FLUX.1: an RMSNorm's or another block's slot too).
  bool onlyModelLinears = false;
  // The forms besides diffusers written with alpha/r folded into lora_B and no
  // ".alpha" (nn::LoraNameRules::foldsAlphaInto).
  std::vector<nn::LoraFileFormat> alphaFoldedForms;
};

class BflLoraRules : public nn::LoraNameRules {
 public:
  BflLoraRules(const FluxParamPlan& plan, BflNames names, BflLoraSpec spec);

  std::string familyName() const override { return spec_.familyName; }
  // Every Linear inside the double and single blocks (ai-toolkit's FLUX set).
  std::vector<std::string> defaultTargets() const override;
  std::vector<nn::LoraLinear> linears() const override { return linears_; }
  std::vector<nn::LoraFileFormat> formats() const override;
  std::optional<nn::LoraSlot> slotOf(const std::string& modulePath, nn::LoraFileFormat format) const override;
  std::optional<nn::LoraStemMatch> matchStem(const std::string& stem) const override;
  std::string peftMetadataPrefix() const override { return kDiffusersLoraPrefix; }
  std::map<std::string, std::string> exportMetadata() const override { return spec_.metadata; }
  bool foldsAlphaInto(nn::LoraFileFormat format) const override;

 private:
  const nn::LoraLinear* findLinear(const std::string& path) const;

  BflNames names_;
  BflLoraSpec spec_;
  std::vector<nn::LoraLinear> linears_;
  std::map<std::string, size_t> linearIndex_;
};

}  // namespace strata::dit
