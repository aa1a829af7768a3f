#pragma once
// FLUX sampling and latent helpers as plain functions (the trainer reuses them):
// 2x2 latent packing, position ids, the dynamic shift mu, the FLUX.1-dev
// flow-match Euler schedule, and a `sample` convenience on top.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "nn/Block.h"

namespace strata::flux {

class FluxTransformer;

// [B, C, H, W] -> [B, (H/2)(W/2), 4C]: 2x2 patches, channel-major inside a patch
// (diffusers' _pack_latents). H and W must be even.
at::Tensor packLatents(const at::Tensor& latents);
// [B, (H/2)(W/2), 4C] -> [B, C, H, W] for latent height H and width W.
at::Tensor unpackLatents(const at::Tensor& packed, int64_t height, int64_t width);

// Position ids of the packed image tokens: [(H/2)(W/2), 3] rows (0, row, col),
// for a latent of height H and width W.
at::Tensor imageIds(int64_t latentHeight, int64_t latentWidth, const at::TensorOptions& options = at::kFloat);
// Text position ids: [tokens, 3] zeros.
at::Tensor textIds(int64_t tokens, const at::TensorOptions& options = at::kFloat);

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
// s' = e^mu / (e^mu + 1/s - 1), elementwise; s = 0 stays 0.
double shiftSigma(double sigma, double mu);
at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu);

// Sampling sigmas: linspace(1, 1/steps, steps) in float32, shifted with mu, then 0
// appended: [steps + 1] float32 (timesteps are sigmas[:steps] * 1000).
at::Tensor samplingSigmas(int64_t steps, double mu);

// One Euler step of the flow: x + (sigmaNext - sigma) v, computed in float32,
// returned in v's dtype (diffusers FlowMatchEulerDiscreteScheduler.step).
at::Tensor eulerStep(const at::Tensor& x, const at::Tensor& velocity, const at::Tensor& sigma,
                     const at::Tensor& sigmaNext);

// Euler sampling on packed tokens. noise [B, N_img, C] packed; txt [B, N_txt, D_txt];
// pooled [B, D_pooled]; guidance is the user's scale (3.5 typical), fed to the
// guidance embedding; sigmas from samplingSigmas. Returns packed [B, N_img, C] float32.
// onStep, when set, is called after each step with (steps done, steps in all).
using SampleProgress = std::function<void(int64_t done, int64_t total)>;
at::Tensor samplePacked(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                        const at::Tensor& txt, const at::Tensor& txtIds, const at::Tensor& pooled, double guidance,
                        const at::Tensor& sigmas, nn::BlockRunner* runner = nullptr, const SampleProgress& onStep = {});

// Convenience: noise latents [B, C, H, W] -> sampled latents [B, C, H, W] with the
// FLUX.1-dev schedule (mu from the token count), zero text ids.
at::Tensor sample(FluxTransformer& model, const at::Tensor& noise, const at::Tensor& txt, const at::Tensor& pooled,
                  double guidance, int64_t steps, nn::BlockRunner* runner = nullptr);

}  // namespace strata::flux
