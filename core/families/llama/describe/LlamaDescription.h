#pragma once
// The Llama family (Llama, Mistral, Qwen2/3) as it describes itself (config/FamilyRegistry.h).
#include "config/FamilyRegistry.h"

namespace strata::families {

config::FamilyDescription describeLlama();

}  // namespace strata::families
