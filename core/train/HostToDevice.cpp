#include "train/HostToDevice.h"

#include <ATen/ATen.h>

#include <memory>

#include "common/Error.h"

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace strata::train {

at::Tensor toDeviceAsync(const at::Tensor& t, const c10::Device& device) {
  if (!device.is_cuda() || !t.device().is_cpu()) return t.to(device);
  // The pinned buffer is freed at once; the host allocator keeps it from being
  // reused until the queued copy out of it has completed.
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

QueuedScalars::QueuedScalars(const std::vector<at::Tensor>& scalars) {
  if (scalars.empty()) return;
  at::NoGradGuard noGrad;
  const c10::Device device = scalars.back().device();
  std::vector<at::Tensor> flat;
  for (const auto& s : scalars) {
    if (s.numel() != 1) throw Error("QueuedScalars: a tensor of " + std::to_string(s.numel()) + " values, not one");
    flat.push_back(s.detach().to(device, at::kDouble, /*non_blocking=*/true).reshape({1}));
  }
  const at::Tensor onDevice = at::cat(flat);
#ifdef STRATA_HAS_CUDA
  if (device.is_cuda()) {
    values_ = at::empty(onDevice.sizes(), onDevice.options().device(at::kCPU).pinned_memory(true));
    values_.copy_(onDevice, /*non_blocking=*/true);
    auto copied = std::make_shared<at::cuda::CUDAEvent>();
    copied->record(c10::cuda::getCurrentCUDAStream(device.index()));
    wait_ = [copied] { copied->synchronize(); };
    return;
  }
#endif
  values_ = onDevice.to(at::kCPU).contiguous();
}

std::vector<double> QueuedScalars::read() const {
  if (!values_.defined()) return {};
  if (wait_) wait_();
  const double* v = values_.data_ptr<double>();
  return {v, v + values_.numel()};
}

}  // namespace strata::train
