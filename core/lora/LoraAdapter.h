#pragma once
// One LoRA adapter on one nn::Linear: y = W x + b + m * (alpha / r) * B A dropout(x).
// It is a torch::nn::Module (so train()/eval() and parameters() work) but never a
// child of its host Linear: the model's named_parameters() stays the checkpoint's
// key set, and Placement moves the adapter through its Attachment (docs/design.md §2.2).
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "nn/Linear.h"
#include "placement/Attachment.h"

namespace strata::lora {

// The network-level strength of every adapter: a scalar, or one value per sample
// of the batch. The per-sample tensor stays on the CPU and is moved to each
// adapter's output device where it is used (seed bug 3), never cached on a device.
class LoraMultiplier {
 public:
  void set(double value);
  void set(const at::Tensor& perSample);  // [B]
  double scalar() const { return scalar_; }
  const at::Tensor& perSample() const { return perSample_; }
  bool isPerSample() const { return perSample_.defined(); }
  // `delta` scaled by the multiplier; delta: [B, ...]. Throws strata::Error when
  // the per-sample count does not match delta's batch size.
  at::Tensor apply(const at::Tensor& delta) const;

 private:
  double scalar_ = 1.0;
  at::Tensor perSample_;  // [B] as given (CPU) or undefined
  // Copies of perSample_ per (device, dtype), made at first use by an adapter
  // there and dropped by set(): one copy per device instead of one per adapter.
  mutable std::vector<at::Tensor> copies_;
};

class LoraAdapter : public torch::nn::Module, public nn::LinearAdapter {
 public:
  // New adapter for `host`: down kaiming-uniform(a = sqrt 5) drawn in float32 on the
  // CPU (placement-independent for a seed), up zeros, both in `dtype` (float32 or
  // bfloat16) on the host weight's device (seed bug 1).
  LoraAdapter(std::string hostPath, std::shared_ptr<nn::LinearImpl> host, int64_t rank, double alpha, double dropout,
              std::shared_ptr<const LoraMultiplier> multiplier, at::ScalarType dtype = at::kFloat);

  // y-delta for input x: [..., in] -> [..., out], in x's dtype. Used by the host's forward.
  at::Tensor delta(const at::Tensor& input, const at::Tensor& baseOutput) override;
  // output + delta(input): the up projection accumulates into the output in one
  // matmul (addmm), in place where the output allows it (no copy of it), with alpha/r
  // and a scalar multiplier folded into the small up weight, not applied to the
  // [..., out] activations; the backward keeps the weights, not their casts.
  // A per-sample multiplier takes delta().
  at::Tensor addTo(const at::Tensor& input, const at::Tensor& output) override;
  // addTo(cat(parts, -1), output) without the concatenated input: the down projection
  // as one matmul per part over its columns of down, accumulated into [..., r].
  at::Tensor addToParts(const std::vector<at::Tensor>& parts, const at::Tensor& output) override;
  // addToParts where parts[geluPart] = gelu_tanh(pre): keeps pre instead of that part and
  // recomputes the GELU in the backward for down's gradient (same op, same values). With
  // dropout in training the dropped part is kept as in addToParts.
  at::Tensor addToGeluParts(const std::vector<at::Tensor>& parts, int64_t geluPart, const at::Tensor& pre,
                            const at::Tensor& output) override;
  // Sibling LoRAs (nn::forwardSiblings) as one down matmul over the concatenated downs and
  // one for their input gradient; per-sample multipliers, dropout in training, or
  // dtypes / devices that differ take the per-adapter path.
  nn::SiblingAdd siblingAdd() const override;
  // The host's dense base gradient in this adapter's backward (nn::LinearAdapter): where
  // fusesWithSiblings() holds (no per-sample multiplier, no dropout in effect: the base's
  // gradient must reach the parts as given) and the parts are in the weight's dtype.
  bool takesBaseGradient(const std::vector<at::Tensor>& parts, const at::Tensor& weight) const override;
  at::Tensor addWithBase(const std::vector<at::Tensor>& parts, int64_t geluPart, const at::Tensor& pre,
                         const at::Tensor& weight, const at::Tensor& output) override;

  // scale * up @ down in float32: [out, in] (without the multiplier).
  at::Tensor deltaWeight() const;

  // Replaces down/up in place (keeps the parameter objects, so an optimizer that
  // holds them stays valid). down: [r, in], up: [out, r]; converted to the weights' dtype on
  // the adapter's device. Throws strata::LoadError naming the host on a shape mismatch.
  void setWeights(const at::Tensor& down, const at::Tensor& up);

  // Called by Placement (through the attachment) and by the network: moves down/up.
  void moveTo(const c10::Device& device);

  const std::string& hostPath() const { return hostPath_; }
  const std::shared_ptr<nn::LinearImpl>& host() const { return host_; }
  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double scale() const { return alpha_ / static_cast<double>(rank_); }
  double dropout() const { return dropout_; }
  c10::Device device() const { return down.device(); }
  // No per-sample multiplier and no dropout in effect: the delta is s * up down x with one
  // scalar s = scale() * multiplierScalar(), which the sibling fusion can express.
  bool fusesWithSiblings() const;
  double multiplierScalar() const;

  at::Tensor down;  // lora_A.weight [r, in], float32
  at::Tensor up;    // lora_B.weight [out, r], float32

 private:
  std::string hostPath_;
  std::shared_ptr<nn::LinearImpl> host_;
  int64_t rank_;
  double alpha_;
  double dropout_;
  std::shared_ptr<const LoraMultiplier> multiplier_;
};

// "lora_adapter".
const placement::AttachmentKind& loraAdapterKind();

// The placement view of one adapter: kind "lora_adapter", hostPath = the host
// Linear's module path, tensors lora_A.weight / lora_B.weight.
class LoraAttachment final : public placement::Attachment {
 public:
  explicit LoraAttachment(std::shared_ptr<LoraAdapter> adapter) : adapter_(std::move(adapter)) {}
  placement::AttachmentKind kind() const override { return loraAdapterKind(); }
  std::string hostPath() const override { return adapter_->hostPath(); }
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override;
  void moveTo(const c10::Device& device) override { adapter_->moveTo(device); }
  const std::shared_ptr<LoraAdapter>& adapter() const { return adapter_; }

 private:
  std::shared_ptr<LoraAdapter> adapter_;
};

}  // namespace strata::lora
