#pragma once
// The gradient clip as the trainer did it before s23's queued forms, kept as the
// reference they must equal bit for bit with float32 gradients on one device: the
// float32 sum of squares read on the host, the root and the factor in double, and
// the gradients scaled only below the limit.
#include <ATen/ATen.h>

#include <cmath>
#include <vector>

namespace strata::test {

inline double clipGradNormOnTheHost(const std::vector<at::Tensor>& params, double maxNorm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  const auto norms = at::stack(at::_foreach_norm(grads)).to(at::kFloat);  // [n]
  const double norm = std::sqrt(norms.pow(2).sum().item<double>());
  const double coef = maxNorm / (norm + 1e-6);
  if (coef < 1.0) at::_foreach_mul_(grads, coef);
  return norm;
}

}  // namespace strata::test
