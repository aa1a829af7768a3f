#include "nn/Linear.h"

#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>

namespace strata::nn {

LinearImpl::LinearImpl(int64_t inFeatures, int64_t outFeatures, bool withBias,
                       const at::TensorOptions& options)
    : inFeatures_(inFeatures), outFeatures_(outFeatures) {
  at::NoGradGuard noGrad;
  weight = register_parameter("weight", at::empty({outFeatures, inFeatures}, options));
  // Same init as torch.nn.Linear, so randomly built models behave like PyTorch's.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (withBias) {
    const double bound = inFeatures > 0 ? 1.0 / std::sqrt(static_cast<double>(inFeatures)) : 0.0;
    bias = register_parameter("bias", at::empty({outFeatures}, options).uniform_(-bound, bound));
  }
}

at::Tensor LinearImpl::forwardBase(const at::Tensor& x) const {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = forwardBase(x);
  for (const auto& adapter : adapters_) y = y + adapter->delta(x, y);
  return y;
}

void LinearImpl::addAdapter(std::shared_ptr<LinearAdapter> adapter) {
  adapters_.push_back(std::move(adapter));
}

void LinearImpl::removeAdapter(const LinearAdapter* adapter) {
  adapters_.erase(std::remove_if(adapters_.begin(), adapters_.end(),
                                 [&](const auto& a) { return a.get() == adapter; }),
                  adapters_.end());
}

}  // namespace strata::nn
