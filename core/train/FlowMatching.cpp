#include "train/FlowMatching.h"

#include <cmath>

#include "common/Error.h"

namespace strata::train {

at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu) {
  const double em = std::exp(mu);
  return em / (em + (1.0 / sigmas - 1.0));
}

at::Tensor sampleSigmas(config::TimestepType type, int64_t batch, double mu, at::Generator& gen) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  at::Tensor s;
  switch (type) {
    case config::TimestepType::Uniform:
      s = at::rand({batch}, gen, opts);
      break;
    case config::TimestepType::Sigmoid:
      s = at::sigmoid(at::randn({batch}, gen, opts));
      break;
    case config::TimestepType::Shift:
      s = shiftSigmas(at::sigmoid(at::randn({batch}, gen, opts)), mu);
      break;
  }
  // Keep s strictly inside (0, 1): at 0 the shift divides by zero, at 1 x0 vanishes.
  return s.clamp(1e-5, 1.0 - 1e-5);
}

NoisedLatents addNoise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& sigmas) {
  if (!x0.sizes().equals(noise.sizes())) throw Error("addNoise: latents and noise differ in shape");
  if (sigmas.dim() != 1 || sigmas.size(0) != x0.size(0)) throw Error("addNoise: sigmas must be [batch]");
  std::vector<int64_t> view(static_cast<size_t>(x0.dim()), 1);
  view[0] = x0.size(0);
  const auto s = sigmas.to(x0.device(), x0.scalar_type()).view(view);  // [B, 1, ...]
  NoisedLatents out;
  out.noisy = (1 - s) * x0 + s * noise;
  out.target = noise - x0;
  return out;
}

at::Tensor flowMatchingLoss(const at::Tensor& prediction, const at::Tensor& target) {
  return at::mse_loss(prediction.to(at::kFloat), target.to(prediction.device(), at::kFloat));
}

}  // namespace strata::train
