// train::toDeviceAsync (label gpu; skips without CUDA): a step's inputs reach the
// card with the same values, and the call returns while earlier kernels are still
// running, so the CPU can launch the forward behind them. A pageable `.to()` waits
// for those kernels and fails the "still running" check.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "common/TestSupport.h"
#include "train/HostToDevice.h"

#ifdef STRATA_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

using namespace strata;

TEST(HostToDeviceGpu, SameValuesWithoutWaitingForQueuedKernels) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
#ifdef STRATA_HAS_CUDA
  const c10::Device cuda(at::kCUDA, 0);
  const auto a = at::randn({8192, 8192}, at::TensorOptions().device(cuda).dtype(at::kBFloat16));
  const auto host = at::randn({512, 4096});     // a step's text embeddings, float32, pageable
  const auto slice = host.narrow(0, 100, 300);  // a view, as fitTokens hands over
  auto busy = a;
  for (int i = 0; i < 40; ++i) busy = at::matmul(busy, a) * 1e-3;  // ~50 ms of queued work on an H200
  const auto got = train::toDeviceAsync(host, cuda);
  const auto gotSlice = train::toDeviceAsync(slice, cuda);
  const bool stillRunning = !c10::cuda::getCurrentCUDAStream(0).query();
  c10::cuda::getCurrentCUDAStream(0).synchronize();
  EXPECT_TRUE(stillRunning) << "toDeviceAsync waited for the kernels queued before it";
  EXPECT_EQ(got.device(), cuda);
  EXPECT_TRUE(at::equal(got.cpu(), host));
  EXPECT_TRUE(at::equal(gotSlice.cpu(), slice));
  // CPU targets and tensors already on the device pass through unchanged.
  EXPECT_TRUE(train::toDeviceAsync(host, c10::Device(c10::kCPU)).is_same(host));
  EXPECT_TRUE(train::toDeviceAsync(got, cuda).is_same(got));
#endif
}

TEST(HostToDeviceGpu, QueuedScalarsAreReadWithoutWaitingForLaterKernels) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
#ifdef STRATA_HAS_CUDA
  const c10::Device cuda(at::kCUDA, 0);
  const auto loss = at::full({}, 2.5, at::TensorOptions().device(cuda));
  const auto norm = at::full({1}, 0.75, at::TensorOptions().device(cuda).dtype(at::kDouble));
  const train::QueuedScalars queued({loss, loss * 2, norm});
  // The next step's work, queued behind the copy.
  const auto a = at::randn({8192, 8192}, at::TensorOptions().device(cuda).dtype(at::kBFloat16));
  auto busy = a;
  for (int i = 0; i < 40; ++i) busy = at::matmul(busy, a) * 1e-3;
  const std::vector<double> values = queued.read();
  const bool stillRunning = !c10::cuda::getCurrentCUDAStream(0).query();
  c10::cuda::getCurrentCUDAStream(0).synchronize();
  EXPECT_TRUE(stillRunning) << "read() waited for the kernels queued after the copy";
  EXPECT_EQ(values, (std::vector<double>{2.5, 5.0, 0.75}));
#endif
}
