#pragma once
// What the core knows about one compute device, real or simulated.
#include <cstdint>
#include <string>

namespace strata::device {

struct DeviceInfo {
  int index = -1;    // CUDA ordinal; -1 for the CPU
  std::string name;  // "NVIDIA H200", "cpu", "simulated 16GB"
  int ccMajor = 0;   // compute capability; 0 for the CPU
  int ccMinor = 0;
  int64_t totalBytes = 0;  // physical memory of the device
  bool simulated = false;  // from a --devices spec, not this machine

  bool isCpu() const { return index < 0; }
  // bf16 matmuls need sm_80 (Ampere) or later; the CPU always has them.
  bool supportsBf16() const { return isCpu() || ccMajor >= 8; }
  // "cuda:0" or "cpu"
  std::string label() const { return isCpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace strata::device
