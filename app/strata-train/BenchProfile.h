#pragma once
// `strata-train bench --profile FILE`: the LibTorch (kineto) profiler around the
// measured steps. Writes the trace (chrome://tracing / Perfetto JSON) to FILE and
// sums the device kernels by name, so the time of a step can be split into matmuls,
// attention and the elementwise work between them without Nsight Systems. A tool for
// finding where a step's time goes, not for timing it: the profiler adds host work.
#include <cstdint>
#include <string>
#include <vector>

namespace strata::cli {

struct KernelTotal {
  std::string name;  // the kernel's name as the driver reports it (demangled)
  int64_t count = 0;
  double totalMs = 0.0;
};

class BenchProfile {
 public:
  void start();
  // Stops, writes the trace to `tracePath` (when not empty) and returns the device
  // kernels summed by name, largest total first (Strata's own "strata::" ranges,
  // which the profiler also puts on the device's timeline, left out).
  std::vector<KernelTotal> stop(const std::string& tracePath);
  bool running() const { return running_; }
  // After stop(): the time some kernel ran (overlaps counted once) and the time from
  // the first kernel's start to the last one's end; the difference is the device idle,
  // waiting for the host.
  double busyMs() const { return busyMs_; }
  double spanMs() const { return spanMs_; }
  // Before the bench: a trace of nothing saved to `tracePath` and removed, so a
  // LibTorch that cannot save one (no kineto) or a path that cannot be written
  // fails in seconds rather than after the measured steps. Throws with the reason.
  static void checkCanSave(const std::string& tracePath);

 private:
  bool running_ = false;
  double busyMs_ = 0.0;
  double spanMs_ = 0.0;
};

// A kernel name's group for the summary: "gemm", "attention", "norm", "elementwise",
// "reduce", "copy/cat", "optimizer" or "other".
std::string kernelGroup(const std::string& name);

}  // namespace strata::cli
