#pragma once
// Gradient-norm clipping over parameters that live on several devices (a split
// model): one partial norm per device, summed on the CPU, then each gradient is
// scaled on its own device. No tensor crosses devices except one scalar each.
#include <ATen/ATen.h>

#include <vector>

namespace strata::train {

// The total L2 norm of every defined gradient: per device and dtype one foreach
// norm launch, squares summed in float32 there, devices summed in float64. Returns NaN/Inf when any gradient has them.
double gradNorm(const std::vector<at::Tensor>& params);

// Scales every gradient by min(1, maxNorm / (norm + 1e-6)) and returns the norm
// before clipping. maxNorm <= 0 only measures. Non-finite norms are returned
// without touching the gradients (the caller stops the run).
double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm);

}  // namespace strata::train
