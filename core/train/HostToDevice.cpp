#include "train/HostToDevice.h"

#include <ATen/ATen.h>

namespace strata::train {

at::Tensor toDeviceAsync(const at::Tensor& t, const c10::Device& device) {
  if (!device.is_cuda() || !t.device().is_cpu()) return t.to(device);
  // The pinned buffer is freed at once; the host allocator keeps it from being
  // reused until the queued copy out of it has completed.
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace strata::train
