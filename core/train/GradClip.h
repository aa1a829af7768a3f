#pragma once
// Gradient-norm clipping over parameters that live on several devices (a split
// model): one partial norm per device, summed on one device, then each gradient is
// scaled on its own device. No tensor crosses devices except one scalar each. The
// queued forms do not wait for a CUDA device (a training step reads the norm once,
// after its optimizer step is queued: Trainer::trainStep); only a scalar bound for
// the CPU is copied with a wait.
#include <ATen/ATen.h>

#include <vector>

namespace strata::train {

// The total L2 norm of every defined gradient as a float64 scalar, on the first
// CUDA device that holds gradients, else the CPU (0 when none is defined): per
// device and dtype one foreach norm launch with its squares summed in float32
// there, those sums added in float64. NaN/Inf when any gradient has them.
at::Tensor gradNormQueued(const std::vector<at::Tensor>& params);

// Queues the scaling of every gradient by min(1, maxNorm / (norm + 1e-6)) and
// returns the norm before clipping (as gradNormQueued). maxNorm <= 0 only
// measures. A non-finite norm leaves the gradients as they are (factor 1).
at::Tensor clipGradNormQueued(const std::vector<at::Tensor>& params, double maxNorm);

// The same, waiting for the value.
double gradNorm(const std::vector<at::Tensor>& params);
double clipGradNorm(const std::vector<at::Tensor>& params, double maxNorm);

}  // namespace strata::train
