// nn::attention and model.attention_backend: auto's decision (nn/Attention.h). The
// timing itself needs a card: tests/gpu/test_attention_gpu.cpp.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "nn/Attention.h"

using namespace strata;
using namespace strata::nn;
using strata::test::allClose;

namespace {

AttentionTiming timing(bool ran, bool finite, double relativeL2, double ms) {
  AttentionTiming t;
  t.ran = ran;
  t.finite = finite;
  t.relativeL2 = relativeL2;
  t.ms = ms;
  if (!ran) t.why = "No available kernel";
  return t;
}

}  // namespace

// auto takes cuDNN only when it ran, its numbers are finite and flash's, and it is faster.
TEST(Attention, AutoTakesCudnnOnlyWhenItIsCorrectAndFaster) {
  const auto flash = timing(true, true, 0, 10.0);
  EXPECT_TRUE(preferCudnn(timing(true, true, 3e-3, 8.0), flash));
  EXPECT_FALSE(preferCudnn(timing(true, true, 3e-3, 12.0), flash));  // slower
  // The bad combinations: faster, but wrong.
  EXPECT_FALSE(preferCudnn(timing(true, false, 0, 1.0), flash));   // non-finite gradients
  EXPECT_FALSE(preferCudnn(timing(true, true, 0.5, 1.0), flash));  // other numbers than flash's
  EXPECT_FALSE(preferCudnn(timing(true, true, NAN, 1.0), flash));  // a distance that is not a number
  EXPECT_FALSE(preferCudnn(timing(true, true, kAttentionTolerance * 1.01, 1.0), flash));
  EXPECT_TRUE(preferCudnn(timing(true, true, kAttentionTolerance, 1.0), flash));
  EXPECT_FALSE(preferCudnn(timing(false, false, 0, 0), flash));  // cuDNN refused the shape
  // Flash cannot run the shape: a correct cuDNN stands on its own.
  EXPECT_TRUE(preferCudnn(timing(true, true, 0, 8.0), timing(false, false, 0, 0)));
}

// The note a run prints once per shape names the kernel, both times, and why cuDNN lost
// where its numbers were wrong.
TEST(Attention, DecisionTextNamesTheKernelAndTheTimes) {
  AttentionDecision d;
  d.shape = "4608 tokens, 24 heads of 128, batch 1, BFloat16, cuda:0";
  d.cudnnTiming = timing(true, true, 3e-3, 7.9);
  d.flashTiming = timing(true, true, 0, 9.1);
  d.cudnn = preferCudnn(d.cudnnTiming, d.flashTiming);
  EXPECT_EQ(d.text(),
            "attention at 4608 tokens, 24 heads of 128, batch 1, BFloat16, cuda:0: cuDNN (a forward and backward: "
            "cuDNN 7.90 ms, flash 9.10 ms)");
  d.cudnnTiming = timing(true, true, 0.4, 7.9);
  d.cudnn = preferCudnn(d.cudnnTiming, d.flashTiming);
  EXPECT_NE(d.text().find(": flash ("), std::string::npos) << d.text();
  EXPECT_NE(d.text().find("cuDNN's numbers were 0.4 from flash's"), std::string::npos) << d.text();
  d.cudnnTiming = timing(false, false, 0, 0);
  EXPECT_NE(d.text().find("cuDNN could not run (No available kernel)"), std::string::npos) << d.text();
}

// On the CPU attention() is LibTorch's attention with the gradient guard, whatever the
// setting: the same values and gradients, and no decision (nothing to time).
TEST(Attention, OnTheCpuItIsPlainAttentionAndDecidesNothing) {
  at::manual_seed(5);
  const auto q = at::randn({1, 5, 2, 4}).transpose(1, 2).requires_grad_(true);  // [B, H, N, Dh] views of [B, N, H, Dh]
  const auto k = at::randn({1, 2, 5, 4}).requires_grad_(true);
  const auto v = at::randn({1, 2, 5, 4}).requires_grad_(true);
  const auto g = at::randn({1, 2, 5, 4});
  const size_t before = attentionDecisions().size();
  for (const bool autoOn : {false, true}) {
    setAttentionAuto(autoOn);
    const auto out = attention(q, k, v);
    auto grads = torch::autograd::grad({out}, {q, k, v}, {g});
    const auto q2 = q.detach().requires_grad_(true), k2 = k.detach().requires_grad_(true),
               v2 = v.detach().requires_grad_(true);
    const auto ref = compat::scaledDotProductAttention(q2, k2, v2);
    auto refGrads = torch::autograd::grad({ref}, {q2, k2, v2}, {g});
    EXPECT_TRUE(allClose(out, ref, 1e-6, 1e-6));
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(allClose(grads[i], refGrads[i], 1e-6, 1e-6)) << i;
  }
  setAttentionAuto(false);
  EXPECT_EQ(attentionDecisions().size(), before);
  // probeAttention on CPU tensors times nothing.
  const auto d = probeAttention(q.detach(), k.detach(), v.detach());
  EXPECT_FALSE(d.cudnnTiming.ran);
  EXPECT_FALSE(d.flashTiming.ran);
  EXPECT_FALSE(d.cudnn);
}
