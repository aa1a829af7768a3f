// The phase timer's memory figures on a real device: a tensor allocated and freed
// inside one phase shows as that phase's peak and not the next one's, what is kept
// shows in "allocated after", and the run's peak survives the timer's resets.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "train/PhaseTimer.h"

using namespace strata;

TEST(PhaseTimerGpu, EachPhaseHasItsOwnPeak) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto opts = at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0);
  constexpr int64_t kMiB = int64_t(1) << 20;
  (void)at::empty({1}, opts);  // the allocator exists after its first allocation
  device::resetPeakMemory(0);
  const int64_t base = device::memoryFigures(0).allocatedBytes;

  train::PhaseTimer timer;
  timer.setDevices({0});
  for (int step = 0; step < 2; ++step) {
    timer.beginStep();
    at::Tensor kept = at::empty({256 * kMiB}, opts);
    {
      at::Tensor transient = at::empty({1024 * kMiB}, opts);  // freed before the mark
      transient.fill_(1);
    }
    timer.mark("forward");
    at::Tensor small = at::empty({64 * kMiB}, opts);
    small.fill_(1);
    small.reset();
    timer.mark("backward");
    kept.reset();
    timer.endStep();
  }
  const int64_t forwardPeak = timer.peakDuring("forward", 1);
  const int64_t backwardPeak = timer.peakDuring("backward", 1);
  EXPECT_GE(forwardPeak, base + 1280 * kMiB);
  EXPECT_LT(forwardPeak, base + 1400 * kMiB);  // allocator rounding only
  EXPECT_GE(backwardPeak, base + 320 * kMiB);
  EXPECT_LT(backwardPeak, forwardPeak - 900 * kMiB);  // the freed 1 GiB is not counted again
  EXPECT_EQ(timer.peakDuring("forward", 2), 0);       // no step left after skipping two
  EXPECT_EQ(timer.peakAllocatedOn(0), forwardPeak);   // the run's peak, across the resets
  EXPECT_GE(timer.peakReservedOn(0), forwardPeak);
  EXPECT_EQ(timer.peakAllocatedOn(1), 0);  // a device the timer was not given
}
