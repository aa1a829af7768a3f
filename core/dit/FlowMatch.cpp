#include "dit/FlowMatch.h"

#include <torch/autograd.h>

#include <cmath>
#include <string>

#include "common/Error.h"

namespace strata::dit {

double shiftMu(int64_t imageTokens, const ShiftParams& p) {
  const double m = (p.maxShift - p.baseShift) / static_cast<double>(p.maxSeqLen - p.baseSeqLen);
  const double b = p.baseShift - m * static_cast<double>(p.baseSeqLen);
  return static_cast<double>(imageTokens) * m + b;
}

double computeEmpiricalMu(int64_t imageSeqLen, int64_t numSteps) {
  // Flux2Pipeline's fit: mu on two lines in the token count, for 10 and 200 steps,
  // interpolated linearly in the step count.
  constexpr double kA1 = 8.73809524e-05, kB1 = 1.89833333;
  constexpr double kA2 = 0.00016927, kB2 = 0.45666666;
  const double seq = static_cast<double>(imageSeqLen);
  if (imageSeqLen > 4300) return kA2 * seq + kB2;
  const double m200 = kA2 * seq + kB2;
  const double m10 = kA1 * seq + kB1;
  const double a = (m200 - m10) / 190.0;
  const double b = m200 - 200.0 * a;
  return a * static_cast<double>(numSteps) + b;
}

double shiftSigma(double sigma, double mu) {
  if (sigma <= 0.0) return 0.0;
  const double e = std::exp(mu);
  return e / (e + 1.0 / sigma - 1.0);
}

at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu) {
  const double e = std::exp(mu);
  const auto shifted = e / (e + (1.0 / sigmas - 1.0));
  return at::where(sigmas > 0, shifted, at::zeros_like(sigmas));
}

at::Tensor samplingSigmas(int64_t steps, double mu) {
  if (steps < 1) throw Error("samplingSigmas: steps must be >= 1, got " + std::to_string(steps));
  // linspace in double, stored as float32, shifted in float32 (as the reference scheduler does).
  const auto base = at::linspace(1.0, 1.0 / static_cast<double>(steps), steps, at::kDouble).to(at::kFloat);
  return at::cat({shiftSigmas(base, mu), at::zeros({1}, at::kFloat)});  // [steps + 1]
}

double FlowSchedule::mu(int64_t imageTokens, int64_t steps) const {
  return shift == Shift::Empirical ? computeEmpiricalMu(imageTokens, steps) : shiftMu(imageTokens, params);
}

at::Tensor FlowSchedule::sigmas(int64_t steps, int64_t imageTokens) const {
  return samplingSigmas(steps, mu(imageTokens, steps));
}

at::Tensor eulerStep(const at::Tensor& x, const at::Tensor& velocity, const at::Tensor& sigma,
                     const at::Tensor& sigmaNext) {
  const auto dt = (sigmaNext.to(at::kFloat) - sigma.to(at::kFloat)).to(x.device());
  return (x.to(at::kFloat) + dt * velocity.to(at::kFloat)).to(velocity.scalar_type());
}

at::Tensor sampleEuler(const at::Tensor& noise, const at::Tensor& sigmas, const Velocity& velocity,
                       const EulerHook& onStep) {
  at::NoGradGuard noGrad;
  const int64_t batch = noise.size(0);
  const auto sig = sigmas.to(at::kFloat).cpu();
  at::Tensor x = noise.to(at::kFloat);
  for (int64_t i = 0; i + 1 < sig.size(0); ++i) {
    // timestep = (sigma * 1000) / 1000 in float32, as the reference pipelines feed it.
    const auto t = (sig[i] * 1000) / 1000;
    const auto v = velocity(x, t.to(noise.device()).expand({batch}).contiguous());  // [B, N, C]
    x = eulerStep(x, v.to(at::kFloat), sig[i], sig[i + 1]);
    if (onStep) onStep(i + 1, sig.size(0) - 1, x);
  }
  return x;
}

}  // namespace strata::dit
