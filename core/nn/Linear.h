#pragma once
// A Linear layer whose parameters carry the state-dict names "weight"/"bias",
// with hooks for adapters (LoRA) that add to its output without becoming its
// children: adapters are registered with placement as attachments instead, so
// the model's named_parameters() stays equal to the checkpoint's key set.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "nn/Quantize.h"

#include <memory>
#include <vector>

namespace strata::nn {

// Something that adds delta(x) to a Linear's output: y = W x + b + sum delta(x).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual at::Tensor delta(const at::Tensor& input, const at::Tensor& baseOutput) = 0;
  // output + delta(input, output); an adapter may fold the sum into its last matmul.
  virtual at::Tensor addTo(const at::Tensor& input, const at::Tensor& output) { return output + delta(input, output); }
  // addTo(cat(parts, -1), output); an adapter may avoid the concatenated copy.
  virtual at::Tensor addToParts(const std::vector<at::Tensor>& parts, const at::Tensor& output) {
    return addTo(at::cat(parts, -1), output);
  }
};

class LinearImpl : public torch::nn::Module {
 public:
  // Parameters are created and initialised directly with `options` (device,
  // dtype): a 12B-parameter model must not be initialised on the CPU first.
  LinearImpl(int64_t inFeatures, int64_t outFeatures, bool withBias = true,
             const at::TensorOptions& options = at::TensorOptions());

  at::Tensor forward(const at::Tensor& x);
  // The frozen base projection only, without adapters.
  at::Tensor forwardBase(const at::Tensor& x) const;
  // forward(cat(parts, -1)) without making the concatenated input: one matmul per
  // part over its columns of the weight, accumulated into one output, and adapters
  // through addToParts. The concatenation would be an extra copy, and the copy kept
  // for the backward (FLUX's single blocks: 28 MB of attention output per block at
  // 1024 px besides the attention's own). parts [..., in_i], sum in_i = in -> [..., out].
  at::Tensor forwardParts(const std::vector<at::Tensor>& parts);

  void addAdapter(std::shared_ptr<LinearAdapter> adapter);
  void removeAdapter(const LinearAdapter* adapter);
  const std::vector<std::shared_ptr<LinearAdapter>>& adapters() const { return adapters_; }

  // Replaces the weight by its quantized storage (int8 / fp8, same name, not
  // trainable) and keeps the float32 scale in weightScale; forward then computes
  // (x W_q^T) * scale + b in x's dtype, so gradients still reach x. The scale is
  // not a parameter or buffer: it travels as a "quant_scale" attachment
  // (placement/QuantScaleAttachment.h). Throws strata::ConfigError when already
  // quantized or for a type this build cannot store.
  void quantize(QuantType t);
  QuantType quantType() const { return quantType_; }
  // The weight in `dtype`, dequantized when quantized: [out, in].
  at::Tensor denseWeight(at::ScalarType dtype) const;

  int64_t inFeatures() const { return inFeatures_; }
  int64_t outFeatures() const { return outFeatures_; }

  at::Tensor weight;       // [out, in]
  at::Tensor bias;         // [out] or undefined
  at::Tensor weightScale;  // float32 [out] or [1] when quantized, else undefined

 private:
  int64_t inFeatures_;
  int64_t outFeatures_;
  QuantType quantType_ = QuantType::None;
  std::vector<std::shared_ptr<LinearAdapter>> adapters_;
};
TORCH_MODULE(Linear);

}  // namespace strata::nn
