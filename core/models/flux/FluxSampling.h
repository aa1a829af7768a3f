#pragma once
// FLUX sampling and latent helpers as plain functions (the trainer reuses them):
// 2x2 latent packing, position ids, Euler sampling with the FLUX.1-dev schedule
// (the shared dit::sampleEuler), and a `sample` convenience on top.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "dit/FlowMatch.h"
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

// The flow-match schedule and Euler step, shared with FLUX.2 (dit/FlowMatch.h):
// FLUX.1 shifts with mu from the image token count (shiftMu).
using dit::eulerStep;
using dit::samplingSigmas;
using dit::shiftMu;
using dit::ShiftParams;
using dit::shiftSigma;
using dit::shiftSigmas;

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
