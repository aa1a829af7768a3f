#pragma once
// Moving a step's inputs from the host to the device without stalling the CPU.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace strata::train {

// `t` on `device`. A CPU tensor bound for a CUDA device goes through pinned memory
// and its copy is queued on the current stream, so the CPU goes on to launch the
// forward at once: a copy from pageable memory makes the CPU wait until the kernels
// already queued (the previous step's) are done, and the card then idles while the
// CPU prepares the next kernels. Anything else is a plain `.to(device)`.
at::Tensor toDeviceAsync(const at::Tensor& t, const c10::Device& device);

}  // namespace strata::train
