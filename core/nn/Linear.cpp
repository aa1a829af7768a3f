#include "nn/Linear.h"

#include <torch/nn/init.h>

#include "common/Error.h"

#include <algorithm>
#include <cmath>

namespace strata::nn {

LinearImpl::LinearImpl(int64_t inFeatures, int64_t outFeatures, bool withBias, const at::TensorOptions& options)
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
  if (quantType_ == QuantType::None)
    return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
  // Per-row (or per-tensor) scales commute with the matmul: scale the output,
  // not a dequantized copy of W. int8 and fp8 e4m3 are exact in bf16.
  at::Tensor y = at::linear(x, weight.to(x.scalar_type())) * weightScale.to(x.scalar_type());  // [..., out]
  if (bias.defined()) y = y + bias.to(x.scalar_type());
  return y;
}

void LinearImpl::quantize(QuantType t) {
  if (quantType_ != QuantType::None) throw ConfigError("nn::Linear: already quantized");
  if (t == QuantType::None) return;
  at::NoGradGuard noGrad;
  auto q = quantizeWeight(weight, t);
  // Same tensor object, so the module's "weight" entry follows; set_data changes the dtype.
  weight.requires_grad_(false);
  weight.set_data(q.data);
  weightScale = q.scale;
  quantType_ = t;
}

at::Tensor LinearImpl::denseWeight(at::ScalarType dtype) const {
  if (quantType_ == QuantType::None) return weight.to(dtype);
  return dequantizeWeight(weight, weightScale, dtype);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = forwardBase(x);
  for (const auto& adapter : adapters_) y = y + adapter->delta(x, y);
  return y;
}

void LinearImpl::addAdapter(std::shared_ptr<LinearAdapter> adapter) { adapters_.push_back(std::move(adapter)); }

void LinearImpl::removeAdapter(const LinearAdapter* adapter) {
  adapters_.erase(std::remove_if(adapters_.begin(), adapters_.end(), [&](const auto& a) { return a.get() == adapter; }),
                  adapters_.end());
}

}  // namespace strata::nn
