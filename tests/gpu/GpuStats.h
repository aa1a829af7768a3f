#pragma once
// Figures the GPU tests print: median times, the caching allocator's memory
// counters on device 0, relative L2 errors. Without CUDA the memory figures are 0.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#ifdef STRATA_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace strata::test::gpu {

// ||a - ref|| / ||ref|| in double on the CPU.
inline double relL2(const at::Tensor& a, const at::Tensor& ref) {
  const auto r = ref.to(at::kDouble).cpu();
  return (a.to(at::kDouble).cpu() - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
}

inline double medianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

inline void synchronize() { torch::cuda::synchronize(); }

// cuDNN runs float32 convolutions in TF32 by default (10-bit mantissa): 9e-4 off
// the reference, ten times the fixtures' tolerance. Parity is float32: off while
// this lives, restored after.
struct NoTf32 {
  NoTf32() : was(at::globalContext().allowTF32CuDNN()) { at::globalContext().setAllowTF32CuDNN(false); }
  ~NoTf32() { at::globalContext().setAllowTF32CuDNN(was); }
  NoTf32(const NoTf32&) = delete;
  NoTf32& operator=(const NoTf32&) = delete;
  bool was;
};

#ifdef STRATA_HAS_CUDA
// The caching allocator of a device exists only after its first allocation; its
// counters throw "Invalid device argument" before that.
inline void initAllocator() {
  static const bool done = [] {
    (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, 0));
    return true;
  }();
  (void)done;
}
#endif

// Bytes allocated now on CUDA device `index` (its allocator made ready first); 0 without CUDA.
inline int64_t currentAllocatedBytesOn(int index) {
#ifdef STRATA_HAS_CUDA
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(index)));
  return c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].current;
#else
  (void)index;
  return 0;
#endif
}

inline int64_t currentAllocatedBytes() {
#ifdef STRATA_HAS_CUDA
  initAllocator();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
#else
  return 0;
#endif
}

inline int64_t peakAllocatedBytes() {
#ifdef STRATA_HAS_CUDA
  initAllocator();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak;
#else
  return 0;
#endif
}

inline int64_t peakReservedBytes() {
#ifdef STRATA_HAS_CUDA
  initAllocator();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].peak;
#else
  return 0;
#endif
}

inline void resetPeak() {
#ifdef STRATA_HAS_CUDA
  initAllocator();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
}

inline double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace strata::test::gpu
