#include "train/GradClip.h"

#include <map>
#include <string>
#include <utility>

#include "common/TorchCompat.h"

namespace strata::train {

namespace {

// Defined gradients by (device, dtype): the foreach kernels take one list of each.
std::map<std::pair<std::string, int>, std::vector<at::Tensor>> gradsByDeviceAndType(
    const std::vector<at::Tensor>& params) {
  std::map<std::pair<std::string, int>, std::vector<at::Tensor>> out;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (g.defined()) out[{g.device().str(), static_cast<int>(g.scalar_type())}].push_back(g);
  }
  return out;
}

}  // namespace

at::Tensor gradNormQueued(const std::vector<at::Tensor>& params) {
  // Per device and dtype the squares of each list's norms (one foreach launch per
  // list), summed on the first device: copies of single scalars, queued.
  at::Tensor sumSquares;
  for (auto& [key, grads] : gradsByDeviceAndType(params)) {
    const auto norms = at::stack(at::_foreach_norm(grads)).to(at::kFloat);  // [n]
    auto sq = norms.pow(2).sum().to(at::kDouble);
    if (sumSquares.defined()) sq = sq.to(sumSquares.device(), /*non_blocking=*/true);
    sumSquares = sumSquares.defined() ? sumSquares + sq : sq;
  }
  if (!sumSquares.defined()) return at::zeros({}, at::kDouble);
  return sumSquares.sqrt();
}

at::Tensor clipGradNormQueued(const std::vector<at::Tensor>& params, double maxNorm) {
  const auto norm = gradNormQueued(params);
  if (maxNorm <= 0.0) return norm;
  // min(1, maxNorm / (norm + eps)); 1 where the norm is not finite, so those
  // gradients are left as they are (the caller stops the run). Scaling by 1 is exact.
  const auto coef =
      at::where(at::isfinite(norm), at::full_like(norm, maxNorm).div(norm + 1e-6).clamp_max(1.0), at::ones_like(norm));
  for (auto& [key, grads] : gradsByDeviceAndType(params))
    compat::foreachMulByScalarTensor(grads, coef.to(grads.front().device(), grads.front().scalar_type(),
                                                    /*non_blocking=*/true));
  return norm;
}

double gradNorm(const std::vector<at::Tensor>& params) { return gradNormQueued(params).item<double>(); }

double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm) {
  return clipGradNormQueued(params, maxNorm).item<double>();
}

}  // namespace strata::train
