// cuDNN's attention backward and the output-gradient layout (nn/Attention.h; label gpu,
// skipped without CUDA). LibTorch 2.11 caches one cuDNN backward plan per q, k, v shape
// and strides; a later backward whose output gradient has other strides runs it anyway.
// The first test shows what LibTorch does then (printed, not asserted: a LibTorch that
// fixes it passes as well); the second holds Strata's attention to flash's numbers on
// that very sequence of layouts; the third runs auto's choice at FLUX.1-dev's shape.
// tests/gpu/repro/cudnn_sdpa_repro.cpp is the same without gtest or Strata, for the
// order that faults the card (it must run in a process of its own).
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "nn/Attention.h"

using namespace strata;
using namespace strata::test::gpu;

namespace {

struct OnlyKernels {
  explicit OnlyKernels(const compat::SdpKernels& k) : saved(compat::sdpKernels()) { compat::setSdpKernels(k); }
  ~OnlyKernels() { compat::setSdpKernels(saved); }
  compat::SdpKernels saved;
};
const compat::SdpKernels kCudnnOnly{true, false, false, false};
const compat::SdpKernels kFlashOnly{false, true, false, false};

// q, k, v of a FLUX block: [B, N, H, Dh] seen as [B, H, N, Dh].
struct Inputs {
  at::Tensor q, k, v;
  at::Tensor denseGrad;   // the output gradient in O's own layout
  at::Tensor narrowGrad;  // a narrow of a wider [B, N, H*Dh + 512] (a fused projection's concatenation)
};

Inputs inputs(int64_t tokens, int64_t heads, int64_t dim) {
  at::manual_seed(11);
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  Inputs in;
  in.q = at::randn({1, tokens, heads, dim}, o).transpose(1, 2);
  in.k = at::randn({1, tokens, heads, dim}, o).transpose(1, 2);
  in.v = at::randn({1, tokens, heads, dim}, o).transpose(1, 2);
  in.denseGrad = at::randn({1, tokens, heads, dim}, o).transpose(1, 2);
  in.narrowGrad = at::randn({1, tokens, heads * dim + 512}, o)
                      .narrow(2, 0, heads * dim)
                      .view({1, tokens, heads, dim})
                      .transpose(1, 2);
  return in;
}

using AttentionFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&);

at::Tensor raw(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return compat::scaledDotProductAttention(q, k, v);
}

// dq, dk, dv of one backward with `grad` as the output's gradient.
std::vector<at::Tensor> gradients(AttentionFn fn, const Inputs& in, const at::Tensor& grad) {
  const auto q = in.q.detach().requires_grad_(true);
  const auto k = in.k.detach().requires_grad_(true);
  const auto v = in.v.detach().requires_grad_(true);
  const auto out = fn(q, k, v);
  return torch::autograd::grad({out}, {q, k, v}, {grad});
}

double worst(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& ref) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = relL2(a[i], ref[i]);
    w = std::isfinite(d) ? std::max(w, d) : INFINITY;
  }
  return w;
}

bool skipWithoutCudnn() { return !torch::cuda::is_available() || !compat::setSdpKernels(compat::sdpKernels()); }

}  // namespace

TEST(AttentionGpu, LibTorchRunsTheFirstBackwardPlanOnAnotherGradientLayout) {
  if (skipWithoutCudnn()) GTEST_SKIP() << "needs CUDA and LibTorch's attention switches (2.4+)";
  const auto in = inputs(1536, 24, 128);
  std::vector<at::Tensor> flashDense, flashNarrow;
  {
    const OnlyKernels flash(kFlashOnly);
    flashDense = gradients(raw, in, in.denseGrad);
    flashNarrow = gradients(raw, in, in.narrowGrad);
  }
  const OnlyKernels cudnn(kCudnnOnly);
  // The plan is made for O's layout; the narrow comes second (the order that reads wrong
  // values inside the narrow's storage; the other order reads past it and faults).
  const double dense = worst(gradients(raw, in, in.denseGrad), flashDense);
  std::string narrowResult;
  try {
    const double d = worst(gradients(raw, in, in.narrowGrad), flashNarrow);
    narrowResult = std::to_string(d) + (d > nn::kAttentionTolerance ? " (WRONG gradients)" : " (right)");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    narrowResult = "refused: " + what.substr(0, what.find('\n'));
  }
  synchronize();
  std::cout << "[attention gpu] LibTorch " << TORCH_VERSION << ", cuDNN attention without Strata's guard: "
            << "dq/dk/dv relative L2 to flash, O's layout first " << dense << ", then a narrow gradient "
            << narrowResult << "\n";
  EXPECT_LT(dense, nn::kAttentionTolerance);
}

// Strata's attention through the same sequence: both backwards give flash's numbers. This
// is the test that fails on the bad combination: without nn::gradInLayoutOf in
// nn::attention the narrow gradient reaches the plan made for O's layout (above).
TEST(AttentionGpu, StrataAttentionGivesFlashNumbersWhateverTheGradientLayout) {
  if (skipWithoutCudnn()) GTEST_SKIP() << "needs CUDA and LibTorch's attention switches (2.4+)";
  nn::setAttentionAuto(false);
  // Another shape than the test above: its own plans, made here first.
  const auto in = inputs(1024, 24, 128);
  std::vector<at::Tensor> flashDense, flashNarrow;
  {
    const OnlyKernels flash(kFlashOnly);
    flashDense = gradients(nn::attention, in, in.denseGrad);
    flashNarrow = gradients(nn::attention, in, in.narrowGrad);
  }
  const OnlyKernels cudnn(kCudnnOnly);
  for (int round = 0; round < 2; ++round) {
    const double dense = worst(gradients(nn::attention, in, in.denseGrad), flashDense);
    const double narrow = worst(gradients(nn::attention, in, in.narrowGrad), flashNarrow);
    std::cout << "[attention gpu] Strata's attention on cuDNN, round " << round << ": O's layout " << dense
              << ", a narrow gradient " << narrow << "\n";
    EXPECT_LT(dense, nn::kAttentionTolerance);
    EXPECT_LT(narrow, nn::kAttentionTolerance);
  }
}

// auto at FLUX.1-dev's 1024 px shape (4608 tokens, 24 heads of 128): one decision for
// the shape, said in words, and the chosen kernel's numbers are flash's.
TEST(AttentionGpu, AutoTimesBothKernelsOnceAndKeepsACorrectOne) {
  if (skipWithoutCudnn()) GTEST_SKIP() << "needs CUDA and LibTorch's attention switches (2.4+)";
  nn::setAttentionAuto(true);
  const auto in = inputs(4608, 24, 128);
  const size_t before = nn::attentionDecisions().size();
  const auto first = gradients(nn::attention, in, in.narrowGrad);
  const auto again = gradients(nn::attention, in, in.denseGrad);
  nn::setAttentionAuto(false);
  const auto decisions = nn::attentionDecisions();
  ASSERT_EQ(decisions.size(), before + 1);  // one per shape, not per call
  const auto& d = decisions.back();
  std::cout << "[attention gpu] " << d.text() << "\n";
  EXPECT_TRUE(d.flashTiming.ran) << d.text();
  EXPECT_NE(d.text().find("4608 tokens, 24 heads of 128"), std::string::npos) << d.text();
  if (d.cudnnTiming.ran) {
    EXPECT_TRUE(d.cudnnTiming.finite) << d.text();
    EXPECT_LT(d.cudnnTiming.relativeL2, nn::kAttentionTolerance) << d.text();
  }
  std::vector<at::Tensor> flash;
  {
    const OnlyKernels only(kFlashOnly);
    flash = gradients(nn::attention, in, in.narrowGrad);
  }
  EXPECT_LT(worst(first, flash), nn::kAttentionTolerance);
  EXPECT_EQ(again.size(), 3u);
}
