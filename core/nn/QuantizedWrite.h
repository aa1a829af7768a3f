#pragma once
// A guard for the writers of a model's float weights (checkpoint exports): a
// quantized nn::Linear's "weight" is its 1-byte storage, and its scale is no
// parameter, so a writer that copies named_parameters() would write values that
// reload as garbage (fp8 even passes a float check).
#include <torch/nn/module.h>

#include <string>

namespace strata::nn {

// Throws strata::Error naming the first quantized Linear inside `module` (by its
// module path) and saying to write the float base instead; `writer` opens the
// message ("saveLlamaFolder"). Does nothing when no Linear is quantized.
void requireUnquantized(const torch::nn::Module& module, const std::string& writer);

}  // namespace strata::nn
