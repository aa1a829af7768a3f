// dist::C10dCollective on Gloo with cards' buffers (label gpu; skips without CUDA or
// Gloo): the two ranks are threads of this process sharing card 0, each on a
// stream of its own as two processes would be. A sum of a card's buffer is waited
// for in the stream's order: the host goes on while the other rank has not even
// started, what is queued after the wait sees the sum, and later calls (a CPU
// all-reduce on the other group, cards' tensors of two dtypes) give their sums. A sum whose other
// rank is gone leaves NaN and says why, and every later call throws it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/TestSupport.h"
#include "common/TwoRanks.h"
#include "dist/C10dCollective.h"

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

using namespace strata;

#ifdef STRATA_HAS_CUDA
namespace {

std::string fixed(double v) { return std::to_string(v); }

// `t` on the host once the current stream has passed everything queued so far, found by
// polling, so the reading thread makes no CUDA call that waits for a held stream.
at::Tensor readWhenDone(const at::Tensor& t) {
  at::cuda::CUDAEvent done;
  done.record(c10::cuda::getCurrentCUDAStream(t.device().index()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done.query()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the stream did not finish in 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return t.cpu();
}

}  // namespace
#endif

TEST(DistGpu, AGlooSumOfACardsBufferIsWaitedForInTheStreamsOrder) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (const auto why = dist::backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
#ifdef STRATA_HAS_CUDA
  const auto results = test::onTwoRanks([](dist::C10dCollective& c, const std::shared_ptr<dist::C10dCollective>&) {
    // A page-locked or a card allocation, and a kernel's first launch in a process (CUDA
    // loads kernels lazily), may wait for the whole card. In one process, such a call
    // made while the other rank's stream is held for a sum that waits on this rank
    // blocks both ranks until the sum times out: in s41, s42 and s43's first iteration
    // a first sum timed out so. So every allocation and every kernel a rank uses
    // below is made and launched first, before either rank holds its stream. `stage`
    // names the last call a rank started, with its error.
    std::string stage = "start";
    try {
      const c10::cuda::CUDAStreamGuard own(c10::cuda::getStreamFromPool(false, 0));
      const auto onCard = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
      const double r = c.rank();
      at::Tensor buffer = at::full({1 << 20}, r + 1, onCard.dtype(at::kFloat));
      std::vector<std::vector<at::Tensor>> byDtype;
      for (const auto dtype : {at::kFloat, at::kDouble})
        byDtype.push_back(
            {at::full({3, 5}, r + 1, onCard.dtype(dtype)), at::full({7}, 10 * (r + 1), onCard.dtype(dtype))});
      {
        std::vector<at::Tensor> warm;  // the staging buffers and the packed buffers
        const auto pinned = at::TensorOptions().device(c10::kCPU).pinned_memory(true);
        warm.push_back(at::empty({1 << 20}, pinned.dtype(at::kFloat)));
        for (const auto dtype : {at::kFloat, at::kDouble}) {
          warm.push_back(at::empty({22}, pinned.dtype(dtype)));
          warm.push_back(at::empty({22}, onCard.dtype(dtype)));
        }
        buffer.mul_(1);
        for (auto& t : byDtype) {  // the packed path's kernels: cat, and the copies back
          const at::Tensor packed = at::cat({t[0].reshape({-1}), t[1].reshape({-1})});
          t[0].copy_(packed.slice(0, 0, 15).view({3, 5}));
          t[1].copy_(packed.slice(0, 15, 22));
        }
        stage = "the barrier after the allocations and the first launches";
        std::vector<at::Tensor> barrier{at::zeros({1})};
        c.allReduceSum(barrier);  // both ranks hold theirs here, so the caches keep one of each per rank
      }
      // Rank 1 starts late: rank 0's host must not wait for it.
      if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
      const auto start = std::chrono::steady_clock::now();
      stage = "the card's sum started";
      auto sum = c.startAllReduceSum(buffer);
      stage = "the card's sum waited for";
      sum->wait();
      buffer.mul_(2);  // queued after the sum: sees it
      const double hostMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      stage = "the card's sum read";
      const at::Tensor got = readWhenDone(buffer);
      std::vector<at::Tensor> flag{at::full({1}, r, at::kFloat)};
      stage = "the CPU sum";
      c.allReduceSum(flag);  // on the other group
      std::string out =
          fixed(got.min().item<double>()) + " " + fixed(got.max().item<double>()) + " " + fixed(flag[0].item<double>());
      // Cards' tensors of two dtypes, one buffer each: one call each, read before the next.
      for (auto& t : byDtype) {
        stage = std::string("the cards' ") + c10::toString(t[0].scalar_type()) + " tensors";
        c.allReduceSum(t);
        out += " " + fixed(readWhenDone(t[0]).sum().item<double>() + readWhenDone(t[1]).sum().item<double>());
      }
      out += " " + c.failure();
      if (c.rank() == 0) out += hostMs < 300.0 ? " | the host went on" : " | the host waited " + fixed(hostMs) + " ms";
      return out;
    } catch (const std::exception& e) {
      return "error at " + stage + ": " + e.what();
    }
  });
  ASSERT_EQ(results.size(), 2u);
  // (1 + 2) x 2 everywhere; 0 + 1; 15 x 3 + 7 x 30 in each dtype.
  const std::string sums = "6.000000 6.000000 1.000000 255.000000 255.000000 ";
  EXPECT_EQ(results[0], sums + " | the host went on");
  EXPECT_EQ(results[1], sums);
#endif
}

TEST(DistGpu, AGlooSumOfACardsBufferWhoseOtherRankIsGoneLeavesNanAndSaysWhy) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (const auto why = dist::backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
#ifdef STRATA_HAS_CUDA
  const auto results = test::onTwoRanks([](dist::C10dCollective& c, const std::shared_ptr<dist::C10dCollective>&) {
    if (c.rank() == 1) return std::string("left");  // its group closes as it returns
    const c10::cuda::CUDAStreamGuard own(c10::cuda::getStreamFromPool(false, 0));
    at::Tensor buffer = at::ones({4096}, at::TensorOptions().device(c10::Device(c10::kCUDA, 0)));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    c.startAllReduceSum(buffer)->wait();
    const at::Tensor got = buffer.cpu();  // waits for the stream, so for the failed sum
    std::string out = got.isnan().all().item<bool>() ? "NaN" : "not NaN: " + fixed(got.max().item<double>());
    out += " | " + c.failure() + " | ";
    try {
      std::vector<at::Tensor> flag{at::ones({1})};
      c.allReduceSum(flag);
      out += "the next call returned";
    } catch (const std::exception& e) {
      out += e.what();
    }
    return out;
  });
  ASSERT_EQ(results.size(), 2u);
  const std::string& r = results[0];
  EXPECT_EQ(r.rfind("NaN | an all-reduce of a card's buffer over 2 ranks on rank 0 failed (did another rank stop?)", 0),
            0u)
      << r;
  const std::string failure = r.substr(6, r.find(" | ", 6) - 6);
  EXPECT_NE(r.find(" | " + failure, 6 + failure.size()), std::string::npos)
      << "the next call throws the same reason: " << r;
#endif
}
