// NVML read at run time on a real GPU: every CUDA device is found among NVML's
// cards by its PCI address, the figures are in range, memory Strata allocates
// shows in the card's "used", and a stream of matmuls shows as utilisation.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include <ATen/ATen.h>

#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "device/GpuUsage.h"

using namespace strata;

namespace {
const device::GpuUsage* byCudaIndex(const device::GpuUsageReading& r, int index) {
  for (const auto& g : r.gpus)
    if (g.cudaIndex == index) return &g;
  return nullptr;
}
}  // namespace

TEST(GpuUsageGpu, EveryCudaDeviceHasItsNvmlFigures) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const device::GpuUsageReading r = device::readGpuUsage();
  ASSERT_TRUE(r.available) << r.reason;
  const int n = strata::test::cudaDeviceCount();
  ASSERT_GE(int(r.gpus.size()), n);
  for (int i = 0; i < n; ++i) {
    const device::GpuUsage* g = byCudaIndex(r, i);
    ASSERT_NE(g, nullptr) << "cuda:" << i << " not matched to an NVML card by PCI address";
    EXPECT_EQ(g->label(), "cuda:" + std::to_string(i));
    EXPECT_GT(g->memoryTotalBytes, 0);
    EXPECT_LE(g->memoryUsedBytes, g->memoryTotalBytes);
    EXPECT_GE(g->utilizationPercent, 0);
    EXPECT_LE(g->utilizationPercent, 100);
    std::cout << g->label() << " (nvml " << g->nvmlIndex << ", " << g->name << "): " << g->utilizationPercent
              << "% busy, " << g->memoryUsedBytes / 1e9 << " of " << g->memoryTotalBytes / 1e9 << " GB used\n";
  }
}

TEST(GpuUsageGpu, AllocationAndWorkShowInTheFigures) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto before = device::readGpuUsage();
  ASSERT_TRUE(before.available) << before.reason;
  const device::GpuUsage* g0 = byCudaIndex(before, 0);
  ASSERT_NE(g0, nullptr);
  const int64_t usedBefore = g0->memoryUsedBytes;
  // Earlier tests in this process leave memory cached in the allocator; asking for
  // more than it holds free makes it take new memory from the driver, which NVML sees.
  const auto cached = device::memoryFigures(0);
  const int64_t kFresh = int64_t(4) << 30;
  const int64_t kBytes = cached.reservedBytes - cached.allocatedBytes + kFresh;
  at::Tensor block = at::empty({kBytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0));
  block.fill_(1);
  torch::cuda::synchronize();
  const int64_t reservedGrowth = device::memoryFigures(0).reservedBytes - cached.reservedBytes;
  const auto after = device::readGpuUsage();
  const int64_t grown = byCudaIndex(after, 0)->memoryUsedBytes - usedBefore;
  std::cout << kBytes / 1e9 << " GB allocated on cuda:0: the allocator took " << reservedGrowth / 1e9
            << " GB more from the driver, NVML used grew by " << grown / 1e9 << " GB\n";
  ASSERT_GE(reservedGrowth, kFresh);
  EXPECT_GE(grown, reservedGrowth * 9 / 10);

  // About 2 s of back-to-back matmuls; NVML's sample period is 1/6 s to 1 s.
  const at::Tensor a = at::randn({8192, 8192}, at::TensorOptions().device(at::kCUDA, 0));
  int busiest = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    for (int i = 0; i < 8; ++i) (void)at::mm(a, a);
    torch::cuda::synchronize();
    busiest = std::max(busiest, byCudaIndex(device::readGpuUsage(), 0)->utilizationPercent);
  }
  std::cout << "busiest cuda:0 reading under matmuls: " << busiest << "%\n";
  EXPECT_GE(busiest, 50);
}
