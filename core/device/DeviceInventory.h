#pragma once
// The compute devices of this machine (or simulated ones from a --devices spec),
// their memory figures, and per-device memory caps (docs/design.md §2.8).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/Text.h"
#include "device/DeviceInfo.h"

namespace strata::device {

// The CUDA devices LibTorch sees, in ordinal order; empty on a CPU build or a
// machine without a GPU. The CPU is not listed (see cpuDevice()).
std::vector<DeviceInfo> listDevices();

// The host as a device: index -1, totalBytes = physical RAM.
DeviceInfo cpuDevice();

// Simulated devices from a spec, for planning without the hardware:
//   "4x16GB"        four 16 GB GPUs
//   "24GB,16GB"     two GPUs of different size
//   "cpu,2x80GB"    the host (its RAM; "cpu:64GB" sets a size) and two 80 GB GPUs
// Sizes take GB / GiB / MB / MiB / TB (GB = 1e9 bytes, GiB = 2^30). GPUs are numbered
// cuda:0, cuda:1, ... in spec order. Throws ConfigError naming the bad item.
std::vector<DeviceInfo> parseDeviceSpec(const std::string& spec);

// "16GB" -> 16e9, "1.5GiB" -> 1.5 * 2^30. Throws ConfigError, also for sizes
// over kMaxDeviceBytes (so no size wraps around int64).
constexpr int64_t kMaxDeviceBytes = 1000000000000000;  // 1 PB
constexpr int64_t kMaxSimulatedDevices = 64;           // per COUNTxSIZE item
int64_t parseByteSize(const std::string& text);

// "15.3 GB" (common/Text.h; here too, as the device layer's figures use it).
using strata::formatBytes;

// What a device's memory looks like now, as this process sees it.
struct MemoryFigures {
  int64_t allocatedBytes = 0;      // held by live tensors (caching allocator)
  int64_t reservedBytes = 0;       // held by the caching allocator (allocated + cached)
  int64_t capBytes = 0;            // this process's cap; 0 = none
  int64_t peakAllocatedBytes = 0;  // since the start or resetPeakMemory
  int64_t peakReservedBytes = 0;
  int64_t totalBytes = 0;  // physical memory
  int64_t freeBytes = 0;   // free on the device (all processes), 0 when unknown
  bool known = false;      // false for simulated devices and the CPU
};

// Starts the peak figures of CUDA device `index` afresh (no-op without CUDA).
void resetPeakMemory(int index);

// Waits until the work queued on CUDA device `index` is done (no-op without CUDA or for index < 0).
void synchronize(int index);

// Figures for CUDA device `index` (zeros with known = false on a CPU build, or
// for index < 0).
MemoryFigures memoryFigures(int index);

// Caps this process's use of CUDA device `index` at `capBytes` through the caching
// allocator's memory fraction (capBytes / total). capBytes <= 0 removes the cap.
// Throws PlacementError on a CPU build or a device that does not exist, and when
// the cap exceeds the device's memory. A cap also turns on the allocator's expandable
// segments (unless PYTORCH_CUDA_ALLOC_CONF is set); they stay on for the process.
void setMemoryCap(int index, int64_t capBytes);
// The cap last set for `index` by setMemoryCap, 0 if none.
int64_t memoryCap(int index);
// Every cap set now, by device index (a device without one is absent).
std::map<int, int64_t> memoryCaps();

// Caps the CUDA devices `indices` at `limitGb` (one value for all, else one per
// device, as resolveCaps reads them). Throws ConfigError when the count matches
// neither.
void applyMemoryCaps(const std::vector<int>& indices, const std::vector<double>& limitGb);

// Free bytes on CUDA device `index` (all processes), touching it first so its
// allocator is set up; 0 on a CPU build, for the cpu (index < 0) or when unknown.
int64_t freeBytesOf(int index);

// True when `what` is an allocator out-of-memory message.
bool isOutOfMemory(const std::exception& e);

// Whether this LibTorch can multiply fp16 matrices on the CPU (1.13 cannot:
// "addmm_impl_cpu_ not implemented for 'Half'"). Probed once with a 2x2 product.
bool cpuHasHalfMatmul();

// Rethrows the exception in flight. An out-of-memory becomes a PlacementError
// naming the device, its cap, what was in use and what was being allocated;
// anything else is rethrown unchanged. Call it only inside a catch block.
[[noreturn]] void rethrowWithCapContext(const std::string& where);

// Runs `fn`; an out-of-memory inside it becomes the PlacementError above.
template <class Fn>
auto withCapContext(const std::string& where, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (...) {
    rethrowWithCapContext(where);
  }
}

}  // namespace strata::device
