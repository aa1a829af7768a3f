#pragma once
// A Linear layer whose parameters carry the state-dict names "weight"/"bias",
// with hooks for adapters (LoRA) that add to its output without becoming its
// children: adapters are registered with placement as attachments instead, so
// the model's named_parameters() stays equal to the checkpoint's key set.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

namespace strata::nn {

// Something that adds delta(x) to a Linear's output: y = W x + b + sum delta(x).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual at::Tensor delta(const at::Tensor& input, const at::Tensor& baseOutput) = 0;
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

  void addAdapter(std::shared_ptr<LinearAdapter> adapter);
  void removeAdapter(const LinearAdapter* adapter);
  const std::vector<std::shared_ptr<LinearAdapter>>& adapters() const { return adapters_; }

  int64_t inFeatures() const { return inFeatures_; }
  int64_t outFeatures() const { return outFeatures_; }

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined

 private:
  int64_t inFeatures_;
  int64_t outFeatures_;
  std::vector<std::shared_ptr<LinearAdapter>> adapters_;
};
TORCH_MODULE(Linear);

}  // namespace strata::nn
