#pragma once
// The LoRA name rules of a Llama-family model (nn::LoraNameRules): adapters on
// peft's seven projections by default, one form, peft's ("base_model.model." +
// the module path, lora_A / lora_B), no fused modules.
#include <string>
#include <vector>

#include "models/llama/LlamaConfig.h"
#include "nn/LoraNameRules.h"

namespace strata::families {

class LlamaLoraRules : public nn::LoraNameRules {
 public:
  explicit LlamaLoraRules(const llama::LlamaConfig& cfg);

  std::string familyName() const override { return "Llama"; }
  std::vector<std::string> defaultTargets() const override;
  std::vector<nn::LoraLinear> linears() const override { return linears_; }
  std::vector<nn::LoraFileFormat> formats() const override { return {nn::LoraFileFormat::Diffusers}; }
  std::optional<nn::LoraSlot> slotOf(const std::string& modulePath, nn::LoraFileFormat format) const override;
  std::optional<nn::LoraStemMatch> matchStem(const std::string& stem) const override;

  static constexpr const char* kPeftPrefix = "base_model.model.";

 private:
  const nn::LoraLinear* find(const std::string& path) const;
  std::vector<nn::LoraLinear> linears_;
};

}  // namespace strata::families
