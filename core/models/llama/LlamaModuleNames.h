#pragma once
// The names a Llama-family model gives its modules, as peft and lora/ take them.
#include <string>
#include <vector>

namespace strata::llama {

// peft's names for the seven projections of a decoder layer: Strata's default
// LoRA targets for this family.
inline std::vector<std::string> peftDefaultTargets() {
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

}  // namespace strata::llama
