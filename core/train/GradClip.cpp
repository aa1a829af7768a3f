#include "train/GradClip.h"

#include <map>
#include <string>
#include <utility>

#include "common/TorchCompat.h"

namespace strata::train {

namespace {

// Defined gradients by (device, dtype): the foreach kernels take one list of each.
using Groups = std::map<std::pair<std::string, int>, std::vector<at::Tensor>>;

Groups gradsByDeviceAndType(const std::vector<at::Tensor>& params) {
  Groups out;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (g.defined()) out[{g.device().str(), static_cast<int>(g.scalar_type())}].push_back(g);
  }
  return out;
}

// A copy queued on the device's stream where it goes to CUDA. Towards the CPU it
// waits: a non-blocking copy from CUDA lands in pinned memory later, and the CPU op
// reading it next would not wait for it.
at::Tensor moveScalar(const at::Tensor& t, const c10::Device& device, at::ScalarType dtype) {
  return t.to(device, dtype, /*non_blocking=*/device.is_cuda());
}

// The groups' total norm (gradNormQueued's contract).
at::Tensor normOf(const Groups& groups) {
  if (groups.empty()) return at::zeros({}, at::kDouble);
  // The sum lives on the first CUDA device when there is one (CPU partials go there
  // with a plain copy), so nothing waits for the device.
  c10::Device sumDevice(c10::kCPU);
  for (const auto& [key, grads] : groups)
    if (grads.front().is_cuda()) {
      sumDevice = grads.front().device();
      break;
    }
  // Per device and dtype the squares of each list's norms (one foreach launch per
  // list), summed in float32 there, then in float64 on sumDevice.
  at::Tensor sumSquares;
  for (const auto& [key, grads] : groups) {
    const auto norms = at::stack(at::_foreach_norm(grads)).to(at::kFloat);  // [n]
    const auto sq = moveScalar(norms.pow(2).sum(), sumDevice, at::kDouble);
    sumSquares = sumSquares.defined() ? sumSquares + sq : sq;
  }
  return sumSquares.sqrt();
}

}  // namespace

at::Tensor gradNormQueued(const std::vector<at::Tensor>& params) { return normOf(gradsByDeviceAndType(params)); }

at::Tensor clipGradNormQueued(const std::vector<at::Tensor>& params, double maxNorm) {
  auto groups = gradsByDeviceAndType(params);
  const auto norm = normOf(groups);
  if (maxNorm <= 0.0) return norm;
  // min(1, maxNorm / (norm + eps)); 1 where the norm is not finite, so those
  // gradients are left as they are (the caller stops the run). Scaling by 1 is exact.
  const auto coef =
      at::where(at::isfinite(norm), at::full_like(norm, maxNorm).div(norm + 1e-6).clamp_max(1.0), at::ones_like(norm));
  for (auto& [key, grads] : groups)
    compat::foreachMulByScalarTensor(grads, moveScalar(coef, grads.front().device(), grads.front().scalar_type()));
  return norm;
}

double gradNorm(const std::vector<at::Tensor>& params) { return gradNormQueued(params).item<double>(); }

double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm) {
  return clipGradNormQueued(params, maxNorm).item<double>();
}

}  // namespace strata::train
