#include "device/PeakMemoryWindows.h"

#include <algorithm>

#include "device/DeviceInventory.h"

namespace strata::device {

PeakMemoryWindows::PeakMemoryWindows(std::vector<int> cudaIndices)
    : cuda_(std::move(cudaIndices)), allocated_(cuda_.size(), 0), reserved_(cuda_.size(), 0) {}

int64_t PeakMemoryWindows::take() {
  int64_t largest = 0;
  for (size_t k = 0; k < cuda_.size(); ++k) {
    const auto f = memoryFigures(cuda_[k]);
    allocated_[k] = std::max(allocated_[k], f.peakAllocatedBytes);
    reserved_[k] = std::max(reserved_[k], f.peakReservedBytes);
    largest = std::max(largest, f.peakAllocatedBytes);
    resetPeakMemory(cuda_[k]);
  }
  return largest;
}

int64_t PeakMemoryWindows::runPeakAllocatedOn(int cudaIndex) const {
  for (size_t k = 0; k < cuda_.size(); ++k)
    if (cuda_[k] == cudaIndex) return allocated_[k];
  return 0;
}

int64_t PeakMemoryWindows::runPeakReservedOn(int cudaIndex) const {
  for (size_t k = 0; k < cuda_.size(); ++k)
    if (cuda_[k] == cudaIndex) return reserved_[k];
  return 0;
}

}  // namespace strata::device
