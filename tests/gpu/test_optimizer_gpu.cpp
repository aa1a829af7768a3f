// GPU checks of the optimizer step and the gradient clip over FLUX.1-dev's LoRA
// tensors (rank 16 on every block Linear, shapes from the model's layout): the fused
// AdamW kernel gives LibTorch AdamW's update, and how long each way takes a step
// (LibTorch's per-tensor AdamW, the foreach path, the fused kernel; the old
// per-tensor norm against the foreach one).
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <vector>

#include "common/GradClipReference.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "models/flux/FluxLayout.h"
#include "train/FusedAdamW.h"
#include "train/GradClip.h"

using namespace strata;
using namespace strata::test::gpu;

namespace {

constexpr int64_t kRank = 16;

// [r, in] and [out, r] for every Linear of every double and single block.
std::vector<std::vector<int64_t>> loraShapes(const flux::FluxConfig& cfg) {
  std::vector<std::vector<int64_t>> out;
  auto add = [&](flux::FluxUnit unit, int64_t count) {
    for (int64_t b = 0; b < count; ++b)
      for (const auto& m : flux::fluxUnitLayout(unit, cfg))
        if (m.type == flux::FluxModuleSpec::Type::Linear) {
          out.push_back({kRank, m.inFeatures});
          out.push_back({m.outFeatures, kRank});
        }
  };
  add(flux::FluxUnit::Double, cfg.numLayers);
  add(flux::FluxUnit::Single, cfg.numSingleLayers);
  return out;
}

std::vector<at::Tensor> makeParams(const std::vector<std::vector<int64_t>>& shapes, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  const auto o = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);
  for (const auto& s : shapes) out.push_back((at::randn(s, o) * 0.02).requires_grad_(true));
  return out;
}

void setGrads(std::vector<at::Tensor>& params, uint64_t seed) {
  at::manual_seed(seed);
  for (auto& p : params) p.mutable_grad() = at::randn(p.sizes(), p.options().requires_grad(false)) * 1e-3;
}

torch::optim::AdamWOptions options() {
  torch::optim::AdamWOptions o(1e-4);
  o.weight_decay(1e-4);
  return o;
}

template <class Fn>
double medianStepMs(int reps, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    synchronize();
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return medianMs(ms);
}

// The gradient norm as Strata computed it before the foreach version: a norm and
// a cast per tensor, stacked.
double perTensorGradNorm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms;
  for (const auto& p : params) norms.push_back(p.grad().detach().to(at::kFloat).norm());
  return at::stack(norms).norm().item<double>();
}

}  // namespace

TEST(OptimizerGpu, FusedAdamWMatchesLibTorchAdamWOnFluxDevLoraTensorsAndIsTimed) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto shapes = loraShapes(flux::FluxConfig::fluxDev());
  int64_t numel = 0;
  for (const auto& s : shapes) numel += s[0] * s[1];
  auto ref = makeParams(shapes, 1);
  auto mine = makeParams(shapes, 1);
  torch::optim::AdamW refOpt(ref, options());
  train::FusedAdamW fused(mine, options());
  for (int s = 0; s < 5; ++s) {
    setGrads(ref, 100 + s);
    setGrads(mine, 100 + s);
    refOpt.step();
    fused.step();
  }
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, relL2(mine[i].detach(), ref[i].detach()));
  double moved = 0;
  const auto start = makeParams(shapes, 1);
  for (size_t i = 0; i < ref.size(); i += 97) moved = std::max(moved, relL2(ref[i].detach(), start[i].detach()));
  std::cout << "[optimizer gpu] " << shapes.size() << " LoRA tensors, " << numel / 1e6 << " M values; after 5 steps "
            << fused.lastPath() << " vs LibTorch AdamW: worst relative L2 " << worst << " (the steps moved them by "
            << moved << ")" << std::endl;
  EXPECT_EQ(fused.lastPath(), compat::kHasFusedAdamW ? "fused" : "foreach");
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(moved, 1e-4);

  // Time a step of each, and the gradient norm each way.
  const double refMs = medianStepMs(10, [&] { refOpt.step(); });
  const double fusedMs = medianStepMs(10, [&] { fused.step(); });
  fused.setAllowFused(false);
  const double foreachMs = medianStepMs(10, [&] { fused.step(); });
  EXPECT_EQ(fused.lastPath(), "foreach");
  double oldNorm = 0, newNorm = 0;
  const double oldNormMs = medianStepMs(10, [&] { oldNorm = perTensorGradNorm(mine); });
  const double newNormMs = medianStepMs(10, [&] { newNorm = train::gradNorm(mine); });
  std::cout << "[optimizer gpu] step: LibTorch AdamW " << refMs << " ms, foreach " << foreachMs << " ms, fused "
            << fusedMs << " ms; gradient norm: per tensor " << oldNormMs << " ms, foreach " << newNormMs << " ms ("
            << oldNorm << " vs " << newNorm << ")" << std::endl;
  EXPECT_NEAR(newNorm, oldNorm, 1e-4 * oldNorm);
}

// The trainer's one-wait step: the clip queued on the device and a fused AdamW that
// skips itself there when the norm is not finite. Same update as the clip read on
// the host before stepping (the pre-s23 arithmetic); a NaN gradient leaves
// parameters and moments as they were.
TEST(OptimizerGpu, QueuedClipAndOnDeviceSkipMatchTheWaitingStep) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  auto shapes = loraShapes(flux::FluxConfig::fluxDev());
  shapes.resize(96);
  auto waited = makeParams(shapes, 3);
  auto queued = makeParams(shapes, 3);
  train::FusedAdamW waitedOpt(waited, options()), queuedOpt(queued, options());
  ASSERT_TRUE(queuedOpt.canSkipOnDevice());
  for (int s = 0; s < 3; ++s) {
    setGrads(waited, 200 + s);
    setGrads(queued, 200 + s);
    const double n = test::clipGradNormOnTheHost(waited, 1e-3);  // small enough to clip
    waitedOpt.step();
    const auto norm = train::clipGradNormQueued(queued, 1e-3);
    queuedOpt.skipNextStepIfNotFinite(norm);
    queuedOpt.step();
    EXPECT_EQ(norm.item<double>(), n) << "step " << s;
  }
  for (size_t i = 0; i < waited.size(); ++i) ASSERT_TRUE(at::equal(waited[i], queued[i])) << "tensor " << i;

  std::vector<at::Tensor> before;
  for (const auto& p : queued) before.push_back(p.detach().clone());
  setGrads(queued, 300);
  queued[7].mutable_grad()[0][0] = NAN;
  const auto norm = train::clipGradNormQueued(queued, 1e-3);
  queuedOpt.skipNextStepIfNotFinite(norm);
  queuedOpt.step();
  EXPECT_TRUE(std::isnan(norm.item<double>()));
  for (size_t i = 0; i < queued.size(); ++i) ASSERT_TRUE(at::equal(before[i], queued[i])) << "tensor " << i;
  // The next step, given finite gradients, updates again.
  setGrads(queued, 301);
  queuedOpt.step();
  EXPECT_FALSE(at::equal(before[0], queued[0]));
  std::cout << "[optimizer gpu] queued clip + on-device skip: " << queued.size()
            << " tensors equal to the waiting step over 3 steps; a NaN gradient skipped the update" << std::endl;
}

// Gradients on the CPU and on a card (a plan that puts blocks on the CPU): the sum
// must not read a copy from the card before it has landed. The card's gradient comes
// out of a long queue of kernels, so a copy that did not wait would read too early.
TEST(OptimizerGpu, NormOverCpuAndCudaGradientsWaitsForTheCard) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  auto onCpu = at::zeros({2}).requires_grad_(true);
  onCpu.mutable_grad() = at::tensor({3.0f, 0.0f});
  const auto o = at::TensorOptions().device(at::kCUDA, 0);
  auto onCard = at::zeros({4096}, o).requires_grad_(true);
  for (int round = 0; round < 5; ++round) {
    const auto m = at::randn({4096, 4096}, o);
    for (int i = 0; i < 20; ++i) (void)at::mm(m, m);  // ~tens of ms queued ahead of the gradient
    // Written by kernels queued behind that work: ready only once the card gets there.
    onCard.mutable_grad() = at::zeros({4096}, o);
    onCard.mutable_grad()[0].fill_(4.0);
    EXPECT_EQ(train::gradNorm({onCpu, onCard}), 5.0) << "round " << round;
    auto a = onCpu, b = onCard;
    EXPECT_EQ(train::clipGradNorm({a, b}, 1.0), 5.0) << "round " << round;
    EXPECT_FLOAT_EQ(a.grad()[0].item<float>(), 0.6f) << "round " << round;
    EXPECT_FLOAT_EQ(b.grad()[0].item<float>(), 0.8f) << "round " << round;
    onCpu.mutable_grad() = at::tensor({3.0f, 0.0f});
  }
}
