#include "nn/Linear.h"

#include <torch/csrc/autograd/custom_function.h>
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

namespace {

// (x W_q^T) * scale over a quantized weight. Per-row (or per-tensor) scales commute
// with the matmul: the output is scaled, not a dequantized copy of W; int8 and fp8
// e4m3 are exact in bf16. Plain autograd would keep the converted copy of W for the
// input gradient until the backward (0.7 GB per FLUX.1-dev double block); this keeps
// only the quantized weight and the scale, which live anyway, and converts W again
// in the backward. The base is frozen: no gradient for W, its scale or the bias.
struct QuantizedMatmul : torch::autograd::Function<QuantizedMatmul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weightQ,
                            const at::Tensor& scale) {
    ctx->save_for_backward({weightQ, scale});
    return at::linear(x, weightQ.to(x.scalar_type())) * scale.to(x.scalar_type());  // [..., out]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& g = gradOut[0];                                          // [..., out]
    const auto gx = at::matmul(g * saved[1].to(g.scalar_type()), saved[0].to(g.scalar_type()));  // [..., in]
    return {gx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor LinearImpl::forwardBase(const at::Tensor& x) const {
  if (quantType_ == QuantType::None)
    return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
  at::Tensor y = x.requires_grad() && at::GradMode::is_enabled()
                     ? QuantizedMatmul::apply(x, weight, weightScale)
                     : at::linear(x, weight.to(x.scalar_type())) * weightScale.to(x.scalar_type());  // [..., out]
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
  for (const auto& adapter : adapters_) y = adapter->addTo(x, y);
  return y;
}

at::Tensor LinearImpl::forwardParts(const std::vector<at::Tensor>& parts) {
  int64_t width = 0;
  for (const auto& p : parts) width += p.size(-1);
  if (parts.empty() || width != inFeatures_)
    throw Error("nn::Linear: parts of total width " + std::to_string(width) + " for a Linear of " +
                std::to_string(inFeatures_) + " inputs");
  // A quantized weight takes the concatenated input (its matmul is one function).
  if (parts.size() == 1) return forward(parts[0]);
  if (quantType_ != QuantType::None) return forward(at::cat(parts, -1));
  auto outSizes = parts[0].sizes().vec();
  outSizes.back() = outFeatures_;
  at::Tensor y;  // [M, out]
  int64_t offset = 0;
  for (const auto& p : parts) {
    const int64_t n = p.size(-1);
    const auto w = weight.narrow(1, offset, n);  // [out, n], rows of stride in: no copy
    const auto p2 = p.reshape({-1, n});          // [M, n]
    if (!y.defined())
      y = bias.defined() ? at::addmm(bias, p2, w.t()) : at::mm(p2, w.t());
    else
      y = at::addmm(y, p2, w.t());  // accumulated where the output is
    offset += n;
  }
  y = y.view(outSizes);  // [..., out]
  for (const auto& adapter : adapters_) y = adapter->addToParts(parts, y);
  return y;
}

void LinearImpl::addAdapter(std::shared_ptr<LinearAdapter> adapter) { adapters_.push_back(std::move(adapter)); }

void LinearImpl::removeAdapter(const LinearAdapter* adapter) {
  adapters_.erase(std::remove_if(adapters_.begin(), adapters_.end(), [&](const auto& a) { return a.get() == adapter; }),
                  adapters_.end());
}

}  // namespace strata::nn
