#pragma once
// Peak allocated memory of a run's CUDA devices over windows the caller chooses (a
// phase of a step, a whole step): take() gives the largest device's peak since the
// last take and starts the devices' peak figures afresh. Those resets would lose the
// run's own peaks, so they are kept here. `strata-train bench` takes one window per
// step, and with --phases one per phase (train/PhaseTimer).
#include <cstdint>
#include <vector>

namespace strata::device {

class PeakMemoryWindows {
 public:
  explicit PeakMemoryWindows(std::vector<int> cudaIndices = {});

  // The largest device's peak allocated bytes since the last take (or construction);
  // starts the peaks afresh. 0 without CUDA devices.
  int64_t take();
  // The run's peak allocated / reserved bytes on CUDA device `cudaIndex` over every
  // window taken so far; 0 for a device not given.
  int64_t runPeakAllocatedOn(int cudaIndex) const;
  int64_t runPeakReservedOn(int cudaIndex) const;

 private:
  std::vector<int> cuda_;
  std::vector<int64_t> allocated_;  // per cuda_ entry, over the run
  std::vector<int64_t> reserved_;
};

}  // namespace strata::device
