#pragma once
// The flow-matching Euler sampler FLUX.1 and FLUX.2 share, with its schedule:
// sigmas linspace(1, 1/steps, steps) in float32, shifted with mu (FLUX.1: mu from
// the image token count, diffusers' calculate_shift; FLUX.2: Flux2Pipeline's
// empirical mu from the token count and the steps), then 0 appended; Euler
// x += (sigma_next - sigma) v in float32 (FlowMatchEulerDiscreteScheduler).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "nn/Block.h"

namespace strata::dit {

// The FLUX.1-dev scheduler's shift constants.
struct ShiftParams {
  int64_t baseSeqLen = 256;
  int64_t maxSeqLen = 4096;
  double baseShift = 0.5;
  double maxShift = 1.15;
};
// mu for `imageTokens` packed tokens: linear through (256, 0.5) and (4096, 1.15),
// not clamped (diffusers' calculate_shift).
double shiftMu(int64_t imageTokens, const ShiftParams& params = {});
// Flux2Pipeline's compute_empirical_mu: fitted on the image token count and the
// number of steps (token counts above 4300 use the 200-step line alone).
double computeEmpiricalMu(int64_t imageSeqLen, int64_t numSteps);

// s' = e^mu / (e^mu + 1/s - 1), elementwise; s = 0 stays 0.
double shiftSigma(double sigma, double mu);
at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu);

// Sampling sigmas: linspace(1, 1/steps, steps) in float32, shifted with mu, then 0
// appended: [steps + 1] float32 (timesteps are sigmas[:steps] * 1000).
at::Tensor samplingSigmas(int64_t steps, double mu);

// Which mu a model samples with.
struct FlowSchedule {
  enum class Shift { ImageTokens, Empirical };
  Shift shift = Shift::ImageTokens;
  ShiftParams params;  // Shift::ImageTokens

  static FlowSchedule imageTokenShift() { return {Shift::ImageTokens, {}}; }
  static FlowSchedule empirical() { return {Shift::Empirical, {}}; }
  double mu(int64_t imageTokens, int64_t steps) const;
  // samplingSigmas(steps, mu(imageTokens, steps)): [steps + 1] float32.
  at::Tensor sigmas(int64_t steps, int64_t imageTokens) const;
};

// One Euler step of the flow: x + (sigmaNext - sigma) v, computed in float32,
// returned in v's dtype.
at::Tensor eulerStep(const at::Tensor& x, const at::Tensor& velocity, const at::Tensor& sigma,
                     const at::Tensor& sigmaNext);

// The model's velocity at latents x [B, N, C] float32 and timestep [B] (sigma, on x's device).
using Velocity = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& timestep)>;
// After each step: steps done, steps in all, the latents after it.
using EulerHook = std::function<void(int64_t done, int64_t total, const at::Tensor& x)>;

// Euler sampling from noise [B, N, C] over sigmas [steps + 1] (no gradient): the
// timestep fed is (sigma * 1000) / 1000 in float32, as the reference pipelines feed
// it. Returns the latents [B, N, C] float32.
at::Tensor sampleEuler(const at::Tensor& noise, const at::Tensor& sigmas, const Velocity& velocity,
                       const EulerHook& onStep = {});

// sampleEuler over a DiT's forward (FLUX.1, FLUX.2): `in` holds the conditioning (text
// states, position ids); the latents, the timestep and the guidance input (the user's
// scale, for every sample) are set here at each step.
template <class Model, class Inputs>
at::Tensor sampleModel(Model& model, Inputs in, const at::Tensor& noise, double guidance, const at::Tensor& sigmas,
                       nn::BlockRunner* runner, const EulerHook& onStep) {
  in.guidance = at::full({noise.size(0)}, guidance, noise.options().dtype(at::kFloat));
  const auto velocity = [&](const at::Tensor& x, const at::Tensor& timestep) {
    in.timestep = timestep;
    in.img = x;
    return model.forward(in, runner);  // [B, N, C]
  };
  return sampleEuler(noise, sigmas, velocity, onStep);
}

}  // namespace strata::dit
