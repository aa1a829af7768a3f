#include "train/GradClip.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

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

double gradNorm(const std::vector<at::Tensor>& params) {
  // Per device, the squares of each list's norms (one foreach launch per list),
  // summed there; one scalar per device comes to the CPU.
  std::map<std::string, at::Tensor> perDevice;
  for (auto& [key, grads] : gradsByDeviceAndType(params)) {
    const auto norms = at::stack(at::_foreach_norm(grads)).to(at::kFloat);  // [n]
    const auto sq = norms.pow(2).sum();
    auto& acc = perDevice[key.first];
    acc = acc.defined() ? acc + sq : sq;
  }
  double sumSquares = 0.0;
  for (const auto& [device, sq] : perDevice) sumSquares += sq.item<double>();
  return std::sqrt(sumSquares);
}

double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm) {
  const double norm = gradNorm(params);
  if (maxNorm <= 0.0 || !std::isfinite(norm)) return norm;
  const double coef = maxNorm / (norm + 1e-6);
  if (coef < 1.0)
    for (auto& [key, grads] : gradsByDeviceAndType(params)) at::_foreach_mul_(grads, coef);
  return norm;
}

}  // namespace strata::train
