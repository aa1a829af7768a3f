// The pure figures of `strata-train bench`: the median of the step times and the
// card's dense bf16 peak by its name.
#include <gtest/gtest.h>

#include "device/CardPeaks.h"
#include "train/PhaseTimer.h"

using strata::device::denseBf16PeakTflops;
using strata::train::medianOf;

TEST(BenchFigures, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(medianOf({4.0, 1.0, 3.0, 2.0}), 2.5);  // sorted[n/2] would say 3
  EXPECT_DOUBLE_EQ(medianOf({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(medianOf({7.0}), 7.0);
  EXPECT_DOUBLE_EQ(medianOf({}), 0.0);
}

TEST(BenchFigures, CardPeaksMatchWholeNamesLongestFirst) {
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA L40"), 181.0);  // not the L4's 121
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA L40S"), 362.0);
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA L4"), 121.0);
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA H100 PCIe"), 756.0);  // not the SXM's 989
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA H200"), 989.0);
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(denseBf16PeakTflops("NVIDIA GeForce RTX 4090"), 165.0);
  EXPECT_FALSE(denseBf16PeakTflops("NVIDIA H100 NVL"));  // a variant without a confirmed figure
  EXPECT_FALSE(denseBf16PeakTflops("NVIDIA A10G"));      // not the A10
  EXPECT_FALSE(denseBf16PeakTflops("cpu"));
}
