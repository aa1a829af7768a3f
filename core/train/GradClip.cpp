#include "train/GradClip.h"

#include <cmath>
#include <map>
#include <string>

namespace strata::train {

double gradNorm(const std::vector<at::Tensor>& params) {
  std::map<std::string, std::vector<at::Tensor>> byDevice;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (g.defined()) byDevice[g.device().str()].push_back(g);
  }
  double sumSquares = 0.0;
  for (auto& [device, grads] : byDevice) {
    std::vector<at::Tensor> norms;
    norms.reserve(grads.size());
    for (const auto& g : grads) norms.push_back(g.detach().to(at::kFloat).norm());
    // One scalar per device comes to the CPU.
    const double n = at::stack(norms).norm().item<double>();
    sumSquares += n * n;
  }
  return std::sqrt(sumSquares);
}

double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm) {
  const double norm = gradNorm(params);
  if (maxNorm <= 0.0 || !std::isfinite(norm)) return norm;
  const double coef = maxNorm / (norm + 1e-6);
  if (coef < 1.0) {
    for (const auto& p : params) {
      auto g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return norm;
}

}  // namespace strata::train
