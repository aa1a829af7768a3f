#pragma once
// Per-GPU utilisation and memory in use, all processes, as the driver reports them
// (NVML). libnvidia-ml is opened at run time, so Strata builds and runs where it is
// absent: the reading then says why there are no figures. Thread-safe.
#include <cstdint>
#include <string>
#include <vector>

namespace strata::device {

struct GpuUsage {
  int nvmlIndex = -1;           // NVML's numbering (PCI order)
  int cudaIndex = -1;           // the CUDA ordinal of the same card (PCI id match); -1 when not known
  std::string name;             // "NVIDIA H200"
  int utilizationPercent = 0;   // kernels running in the last sample period, 0..100
  int64_t memoryUsedBytes = 0;  // every process's use of the card
  int64_t memoryTotalBytes = 0;
  // "cuda:1" when the CUDA ordinal is known, else "gpu 1" (NVML's index).
  std::string label() const;
};

struct GpuUsageReading {
  bool available = false;  // NVML loaded and answered
  std::string reason;      // why not: "libnvidia-ml.so.1 not found (no NVIDIA driver)", ...
  std::vector<GpuUsage> gpus;
};

// One reading of every GPU. The library is loaded and initialised on the first call
// and kept; a failed load is not retried (the driver does not appear while running).
GpuUsageReading readGpuUsage();

}  // namespace strata::device
