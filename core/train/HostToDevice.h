#pragma once
// Moving a step's inputs to the device, and its scalars back, without stalling the CPU.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <vector>

namespace strata::train {

// `t` on `device`. A CPU tensor bound for a CUDA device goes through pinned memory
// and its copy is queued on the current stream, so the CPU goes on to launch the
// forward at once: a copy from pageable memory makes the CPU wait until the kernels
// already queued (the previous step's) are done, and the card then idles while the
// CPU prepares the next kernels. Anything else is a plain `.to(device)`.
at::Tensor toDeviceAsync(const at::Tensor& t, const c10::Device& device);

// Scalars a step computed on a device (its losses, its gradient norm), copied to
// pinned host memory behind the work that makes them. read() waits for that copy
// only: the host can queue the next step first and read these while the card runs
// it, where `.item()` would wait for everything queued on the stream and leave the
// card idle while the host then prepared the next step. On the CPU they are read
// at once.
class QueuedScalars {
 public:
  QueuedScalars() = default;
  // One value each; moved to the last one's device (the others are copied there in
  // stream order), as double.
  explicit QueuedScalars(const std::vector<at::Tensor>& scalars);
  bool empty() const { return !values_.defined(); }
  // The values, in the order given; waits for the copy.
  std::vector<double> read() const;

 private:
  at::Tensor values_;           // double, on the host
  std::function<void()> wait_;  // for the copy, where it is queued
};

}  // namespace strata::train
