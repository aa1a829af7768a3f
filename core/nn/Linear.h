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

class LinearAdapter;

// outputs[i] += adapters[i]'s delta(x), for one adapter on each of Linears that read the
// same x, as one computation; false, with outputs untouched, when the group cannot be
// fused exactly (then each adapter adds its own). See forwardSiblings. With baseWeights
// (one frozen dense [out_i, in] weight per Linear, else empty) the outputs were computed
// from x without autograd and the computation's backward gives x the bases' gradient too
// (LinearAdapter::takesBaseGradient said yes for each): it must not return false then.
using SiblingAdd = bool (*)(const std::vector<LinearAdapter*>& adapters, const at::Tensor& x,
                            std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& baseWeights);

// The fused paths of this file (forwardSiblings, forwardParts' GELU part, the quantized
// column split) and the attention gradient's layout; on unless STRATA_FUSED_PATHS=0 is in
// the environment. Off: the plain per-adapter ops, for debugging (docs/speed.md).
bool fusedPaths();
void setFusedPaths(bool on);

// Something that adds delta(x) to a Linear's output: y = W x + b + sum delta(x).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual at::Tensor delta(const at::Tensor& input, const at::Tensor& baseOutput) = 0;
  // output + delta(input, output); an adapter may fold the sum into its last matmul, and
  // add into `output` in place: the caller hands the output over and uses the result.
  virtual at::Tensor addTo(const at::Tensor& input, const at::Tensor& output) { return output + delta(input, output); }
  // addTo(cat(parts, -1), output); an adapter may avoid the concatenated copy.
  virtual at::Tensor addToParts(const std::vector<at::Tensor>& parts, const at::Tensor& output) {
    return addTo(at::cat(parts, -1), output);
  }
  // addToParts(parts, output) where parts[geluPart] = gelu_tanh(pre): an adapter may keep
  // `pre` for its backward instead of that part (the GELU's backward keeps it anyway) and
  // recompute the part there.
  virtual at::Tensor addToGeluParts(const std::vector<at::Tensor>& parts, int64_t /*geluPart*/,
                                    const at::Tensor& /*pre*/, const at::Tensor& output) {
    return addToParts(parts, output);
  }
  // Adapters returning the same non-null function may be fused by forwardSiblings.
  virtual SiblingAdd siblingAdd() const { return nullptr; }

  // The base's input gradient in the adapter's backward (a fused path): whether this
  // adapter, alone on a Linear whose frozen dense weight is `weight` [out, in], can take
  // `parts` (addWithBase). Its backward then gives each part g W[:, cols_i] and its own
  // gradient summed in one accumulating GEMM, where autograd would compute the two
  // [M, n_i] gradients apart and add them (one add per Linear and step).
  virtual bool takesBaseGradient(const std::vector<at::Tensor>& /*parts*/, const at::Tensor& /*weight*/) const {
    return false;
  }
  // output (cat(parts) W^T + b, computed without autograd) + delta(cat(parts)), with the
  // base's input gradient in the backward. Only where takesBaseGradient(parts, weight)
  // said yes. geluPart / pre as addToGeluParts (-1 / undefined: none).
  virtual at::Tensor addWithBase(const std::vector<at::Tensor>& parts, int64_t geluPart, const at::Tensor& pre,
                                 const at::Tensor& weight, const at::Tensor& output);
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
  // With geluPart >= 0, parts[geluPart] is given before at::gelu(., "tanh") and the Linear
  // applies it; the GELU output is then kept by nobody for the backward (adapters keep
  // the pre-activation, which the GELU keeps anyway; a frozen base needs only W): 113 MB
  // per FLUX.1-dev MLP at 1024 px.
  at::Tensor forwardParts(const std::vector<at::Tensor>& parts, int64_t geluPart = -1);
  // forward(gelu_tanh(pre)) keeping only pre: forwardParts({pre}, 0).
  at::Tensor forwardGelu(const at::Tensor& pre) { return forwardParts({pre}, 0); }

  // The weight whose input gradient the one adapter's backward may take over
  // (LinearAdapter::takesBaseGradient): the fused paths on, a dense frozen weight and
  // bias in bf16 or fp16, exactly one adapter. Undefined otherwise. Half precision only:
  // there the separate add rounds the [M, in] gradient once more and costs a kernel
  // launch on a card whose step is bound by them; a float32 sum loses nothing to it.
  at::Tensor fusableBaseWeight() const;

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
  // Multiplies on the fp8 tensor cores from now on (nn/Quantize.h, enableFp8Matmul):
  // an fp8-quantized Linear whose dims are multiples of 16, fed bf16 on CUDA. False,
  // and nothing changes, for one that does not qualify (it keeps the dequantizing matmul).
  bool useFp8Matmul(Fp8Backward backward = Fp8Backward::Bf16);
  bool fp8Matmul() const { return fp8Matmul_; }
  Fp8Backward fp8Backward() const { return fp8Backward_; }
  // The weight in `dtype`, dequantized when quantized: [out, in].
  at::Tensor denseWeight(at::ScalarType dtype) const;
  // With Fp8Backward::Fp8KeptTranspose: the fp8 weight's transposed copy [in, out], made by
  // the first forward whose backward needs it; undefined before that and in other modes.
  // It travels with the weight's scale (placement/QuantScaleAttachment.h).
  const at::Tensor& keptWeightTranspose() const { return weightT_; }
  void moveKeptWeightTranspose(const c10::Device& device);

  int64_t inFeatures() const { return inFeatures_; }
  int64_t outFeatures() const { return outFeatures_; }

  at::Tensor weight;       // [out, in]
  at::Tensor bias;         // [out] or undefined
  at::Tensor weightScale;  // float32 [out] or [1] when quantized, else undefined

 private:
  int64_t inFeatures_;
  int64_t outFeatures_;
  QuantType quantType_ = QuantType::None;
  bool fp8Matmul_ = false;
  Fp8Backward fp8Backward_ = Fp8Backward::Bf16;
  // Made lazily by forwardBase (const: a cache of the frozen weight, not model state).
  mutable at::Tensor weightT_;  // [in, out] fp8 or undefined
  std::vector<std::shared_ptr<LinearAdapter>> adapters_;
};
TORCH_MODULE(Linear);

// The outputs of Linears that read the same x ({q, k, v}): each base projection as it is,
// and when every Linear of a subset has exactly one adapter with the same siblingAdd,
// their deltas as one computation (LoRA: one down matmul over the concatenated downs).
// Anything else goes through each Linear's forward. -> [..., out_i] per Linear.
std::vector<at::Tensor> forwardSiblings(const std::vector<LinearImpl*>& linears, const at::Tensor& x);

}  // namespace strata::nn
