#pragma once
// Rectified-flow training objective of FLUX (docs/design.md §3):
//   x_t = (1 - s) x0 + s e,  target = e - x0,  loss = MSE(pred, target)
// with s drawn per sample. All random draws come from the caller's generator
// (CPU), so a run is reproducible on any device and resumable.
#include <ATen/ATen.h>

#include "config/RunConfig.h"

namespace strata::train {

// s' = e^mu / (e^mu + 1/s - 1): pushes s towards 1 (more noise) for larger images.
at::Tensor shiftSigmas(const at::Tensor& sigmas, double mu);

// Per-sample s in (0, 1), [batch] float32 on the CPU:
//   Sigmoid: sigmoid(randn)   (logit-normal)
//   Uniform: rand
//   Shift:   sigmoid(randn) shifted with mu
at::Tensor sampleSigmas(config::TimestepType type, int64_t batch, double mu, at::Generator& gen);

struct NoisedLatents {
  at::Tensor noisy;   // x_t, like x0
  at::Tensor target;  // e - x0, like x0
};

// x0, noise: [B, ...] on any device; sigmas: [B] (moved to x0's device).
NoisedLatents addNoise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& sigmas);

// Mean squared error in float32, whatever the compute dtype; a scalar.
at::Tensor flowMatchingLoss(const at::Tensor& prediction, const at::Tensor& target);

}  // namespace strata::train
