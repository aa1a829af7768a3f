#include "nn/GradLayout.h"

#include <torch/csrc/autograd/custom_function.h>

namespace strata::nn {

namespace {

struct GradInLayout : torch::autograd::Function<GradInLayout> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["strides"] = x.strides().vec();
    return x;  // returned as a view of x, with this node as its grad_fn
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto& g = gradOut[0];
    const auto strides = ctx->saved_data["strides"].toIntVector();
    if (g.strides() == at::IntArrayRef(strides)) return {g};
    auto laid = at::empty_strided(ctx->saved_data["sizes"].toIntVector(), strides, g.options());
    laid.copy_(g);
    return {laid};
  }
};

}  // namespace

at::Tensor gradInLayoutOf(const at::Tensor& x) {
  // Not one of the fused paths that STRATA_FUSED_PATHS=0 turns off: cuDNN's attention
  // backward gives wrong gradients without it (nn/Attention.h).
  if (!x.requires_grad() || !at::GradMode::is_enabled()) return x;
  if (!x.unsafeGetTensorImpl()->is_non_overlapping_and_dense()) return x;
  return GradInLayout::apply(x);
}

}  // namespace strata::nn
