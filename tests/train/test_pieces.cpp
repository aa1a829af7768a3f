// LR schedules, flow matching, gradient clipping, RNG states.
#include <gtest/gtest.h>

#include <cmath>

#include "common/Error.h"
#include "common/GradClipReference.h"
#include "train/FlowMatching.h"
#include "train/GradClip.h"
#include "train/HostToDevice.h"
#include "train/LossScaler.h"
#include "train/LrSchedule.h"
#include "train/RngState.h"

using namespace strata;
using namespace strata::train;
using config::LrScheduler;
using config::TimestepType;

TEST(LrSchedule, ConstantIsFlat) {
  LrSchedule s(LrScheduler::Constant, 1e-3, 100, 0);
  EXPECT_DOUBLE_EQ(s.lrAt(0), 1e-3);
  EXPECT_DOUBLE_EQ(s.lrAt(99), 1e-3);
}

TEST(LrSchedule, WarmupRampsThenHolds) {
  LrSchedule s(LrScheduler::Warmup, 1.0, 100, 4);
  EXPECT_DOUBLE_EQ(s.lrAt(0), 0.25);
  EXPECT_DOUBLE_EQ(s.lrAt(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lrAt(3), 1.0);
  EXPECT_DOUBLE_EQ(s.lrAt(50), 1.0);
}

TEST(LrSchedule, CosineDecaysToZeroAfterWarmup) {
  LrSchedule s(LrScheduler::Cosine, 2.0, 12, 2);
  EXPECT_DOUBLE_EQ(s.lrAt(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lrAt(2), 2.0);    // start of decay
  EXPECT_NEAR(s.lrAt(7), 1.0, 1e-12);  // halfway: cos(pi/2)
  EXPECT_LT(s.lrAt(11), s.lrAt(10));
  EXPECT_NEAR(s.lrAt(12), 0.0, 1e-12);
  for (int i = 3; i < 12; ++i) EXPECT_LT(s.lrAt(i), s.lrAt(i - 1));
}

TEST(LrSchedule, LinearDecays) {
  LrSchedule s(LrScheduler::Linear, 1.0, 10, 0);
  EXPECT_DOUBLE_EQ(s.lrAt(0), 1.0);
  EXPECT_NEAR(s.lrAt(5), 0.5, 1e-12);
  EXPECT_NEAR(s.lrAt(10), 0.0, 1e-12);
}

TEST(LrSchedule, RejectsBadSettings) {
  EXPECT_THROW(LrSchedule(LrScheduler::Constant, 1e-4, 0, 0), ConfigError);
  EXPECT_THROW(LrSchedule(LrScheduler::Constant, 1e-4, 10, -1), ConfigError);
}

TEST(FlowMatching, NoiseInterpolatesAndTargetIsVelocity) {
  auto x0 = at::randn({3, 4, 5});
  auto e = at::randn({3, 4, 5});
  auto s = at::tensor({0.0f, 0.5f, 1.0f});
  auto n = addNoise(x0, e, s);
  EXPECT_TRUE(at::allclose(n.noisy[0], x0[0]));
  EXPECT_TRUE(at::allclose(n.noisy[1], 0.5 * (x0[1] + e[1])));
  EXPECT_TRUE(at::allclose(n.noisy[2], e[2]));
  EXPECT_TRUE(at::allclose(n.target, e - x0));
}

TEST(FlowMatching, ShiftMatchesFormula) {
  const double mu = 1.15;
  auto s = at::tensor({0.1, 0.5, 0.9}, at::kDouble);
  auto shifted = shiftSigmas(s, mu);
  for (int i = 0; i < 3; ++i) {
    const double v = s[i].item<double>();
    const double expect = std::exp(mu) / (std::exp(mu) + 1.0 / v - 1.0);
    EXPECT_NEAR(shifted[i].item<double>(), expect, 1e-12);
    EXPECT_GT(shifted[i].item<double>(), v);  // mu > 0 pushes towards noise
  }
}

TEST(FlowMatching, SamplersAreSeededAndInRange) {
  for (auto type : {TimestepType::Sigmoid, TimestepType::Uniform, TimestepType::Shift}) {
    auto g1 = makeCpuGenerator(7), g2 = makeCpuGenerator(7);
    auto a = sampleSigmas(type, 4096, 0.8, g1);
    auto b = sampleSigmas(type, 4096, 0.8, g2);
    EXPECT_TRUE(a.equal(b));
    EXPECT_GT(a.min().item<double>(), 0.0);
    EXPECT_LT(a.max().item<double>(), 1.0);
  }
  auto g = makeCpuGenerator(1);
  // logit-normal is centred at 0.5; shift with mu > 0 moves the mean up.
  EXPECT_NEAR(sampleSigmas(TimestepType::Sigmoid, 20000, 0.0, g).mean().item<double>(), 0.5, 0.01);
  EXPECT_GT(sampleSigmas(TimestepType::Shift, 20000, 1.0, g).mean().item<double>(), 0.6);
  EXPECT_NEAR(sampleSigmas(TimestepType::Uniform, 20000, 0.0, g).mean().item<double>(), 0.5, 0.01);
}

TEST(FlowMatching, LossIsFloat32Mse) {
  auto p = at::ones({2, 3}, at::kBFloat16);
  auto t = at::zeros({2, 3});
  auto l = flowMatchingLoss(p, t);
  EXPECT_EQ(l.scalar_type(), at::kFloat);
  EXPECT_DOUBLE_EQ(l.item<double>(), 1.0);
}

TEST(GradClip, NormAndClip) {
  auto a = at::zeros({2}).requires_grad_(true);
  auto b = at::zeros({1}).requires_grad_(true);
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0f});
  EXPECT_NEAR(gradNorm({a, b}), 5.0, 1e-6);
  EXPECT_NEAR(clipGradNorm({a, b}, 10.0), 5.0, 1e-6);  // under the limit: untouched
  EXPECT_FLOAT_EQ(a.grad()[0].item<float>(), 3.0f);
  EXPECT_NEAR(clipGradNorm({a, b}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(gradNorm({a, b}), 1.0, 1e-5);
  EXPECT_NEAR(a.grad()[0].item<float>(), 0.6f, 1e-5);
}

TEST(GradClip, NonFiniteNormIsReportedNotApplied) {
  auto a = at::zeros({2}).requires_grad_(true);
  a.mutable_grad() = at::tensor({NAN, 1.0f});
  EXPECT_TRUE(std::isnan(clipGradNorm({a}, 1.0)));
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), 1.0f);
}

TEST(GradClip, QueuedFormsEqualTheOldArithmeticBitForBit) {
  auto make = [](uint64_t seed) {
    at::manual_seed(seed);
    std::vector<at::Tensor> ps;
    for (const auto& shape : std::vector<std::vector<int64_t>>{{16, 64}, {64, 16}, {16, 96}, {7}}) {
      auto p = at::zeros(shape).requires_grad_(true);
      p.mutable_grad() = at::randn(shape) * 0.3;
      ps.push_back(p);
    }
    return ps;
  };
  for (const double maxNorm : {1e-2, 1.0, 1e3}) {  // clipped, clipped, untouched
    auto reference = make(7), queued = make(7);
    const double n = test::clipGradNormOnTheHost(reference, maxNorm);
    const auto norm = clipGradNormQueued(queued, maxNorm);
    EXPECT_EQ(norm.scalar_type(), at::kDouble);
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_EQ(norm.item<double>(), n) << maxNorm;
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_TRUE(at::equal(reference[i].grad(), queued[i].grad())) << "tensor " << i << ", limit " << maxNorm;
  }
  // Two dtypes make two foreach lists; no gradient yet is a norm of 0.
  auto a = at::zeros({2}).requires_grad_(true);
  auto b = at::zeros({1}, at::kDouble).requires_grad_(true);
  a.mutable_grad() = at::tensor({3.0f, 0.0f});
  b.mutable_grad() = at::tensor({4.0}, at::kDouble);
  EXPECT_EQ(gradNormQueued({a, b}).item<double>(), 5.0);
  EXPECT_EQ(gradNormQueued({at::zeros({2}).requires_grad_(true)}).item<double>(), 0.0);
}

TEST(LossScaler, DisabledChangesNothing) {
  LossScaler off;
  EXPECT_FALSE(off.enabled());
  auto a = at::zeros({2}).requires_grad_(true);
  a.mutable_grad() = at::tensor({NAN, 2.0f});
  const auto loss = at::tensor(3.0f);
  EXPECT_FLOAT_EQ(off.scaled(loss).item<float>(), 3.0f);
  EXPECT_TRUE(off.unscale({a}));  // disabled: the caller's own checks decide
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), 2.0f);
  off.update(false);
  EXPECT_DOUBLE_EQ(off.scale(), 1.0);
  EXPECT_FALSE(off.exhausted());
}

TEST(LossScaler, ScaledBackwardThenUnscaleGivesTheTrueGradients) {
  LossScaler scaler{LossScalerOptions{}};
  ASSERT_TRUE(scaler.enabled());
  EXPECT_DOUBLE_EQ(scaler.scale(), 65536.0);
  auto w = at::tensor({0.5f, -1.5f}).requires_grad_(true);
  const auto x = at::tensor({2.0f, 4.0f});
  scaler.scaled((w * x).sum()).backward();
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), 2.0f * 65536.0f);
  ASSERT_TRUE(scaler.unscale({w}));
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(w.grad()[1].item<float>(), 4.0f);
}

TEST(LossScaler, OverflowSkipsAndHalvesCleanStepsGrowTheScale) {
  LossScalerOptions o;
  o.initScale = 8.0;
  o.growthInterval = 3;
  o.minScale = 1.0;
  LossScaler scaler(o);
  auto a = at::zeros({2}).requires_grad_(true);
  a.mutable_grad() = at::tensor({INFINITY, 1.0f});
  EXPECT_FALSE(scaler.unscale({a}));
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), 1.0f);  // left as they were
  scaler.update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  for (int i = 0; i < 2; ++i) scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.cleanSteps(), 2);
  scaler.update(false);  // an overflow restarts the count
  EXPECT_EQ(scaler.cleanSteps(), 0);
  EXPECT_DOUBLE_EQ(scaler.scale(), 2.0);
  for (int i = 0; i < 3; ++i) scaler.update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.cleanSteps(), 0);
  EXPECT_FALSE(scaler.exhausted());
  for (int i = 0; i < 3; ++i) scaler.update(false);  // 4 -> 0.5: below minScale
  EXPECT_TRUE(scaler.exhausted());
}

TEST(LossScaler, RestoreTakesACheckpointedStateAndRefusesBadOnes) {
  LossScaler scaler{LossScalerOptions{}};
  scaler.restore(1024.0, 17);
  EXPECT_DOUBLE_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.cleanSteps(), 17);
  EXPECT_THROW(scaler.restore(0.0, 0), Error);
  EXPECT_THROW(scaler.restore(NAN, 0), Error);
  EXPECT_THROW(scaler.restore(2.0, -1), Error);
  LossScalerOptions bad;
  bad.backoffFactor = 1.5;
  EXPECT_THROW(LossScaler{bad}, Error);
}

TEST(RngState, CaptureAndRestoreRepeatsDraws) {
  auto g = makeCpuGenerator(3);
  at::randn({5}, g);
  const auto states = captureRngStates(g, {});
  auto first = at::randn({8}, g);
  auto globalFirst = at::rand({8});
  at::randn({100}, g);
  at::rand({100});
  auto restored = restoreRngStates(g, states);
  EXPECT_EQ(restored.size(), 2u);
  EXPECT_TRUE(at::randn({8}, g).equal(first));
  EXPECT_TRUE(at::rand({8}).equal(globalFirst));
}

TEST(QueuedScalars, TheValuesInTheOrderGivenAsDoubleAndOneValueEach) {
  EXPECT_TRUE(train::QueuedScalars().empty());
  EXPECT_TRUE(train::QueuedScalars().read().empty());
  const train::QueuedScalars q({at::full({}, 1.5f), at::full({1}, -2.0, at::kDouble), at::full({1, 1}, 0.25f)});
  EXPECT_FALSE(q.empty());
  EXPECT_EQ(q.read(), (std::vector<double>{1.5, -2.0, 0.25}));
  EXPECT_EQ(q.read(), (std::vector<double>{1.5, -2.0, 0.25})) << "read twice, the same";
  const train::QueuedScalars nan({at::full({}, std::nan(""))});
  EXPECT_TRUE(std::isnan(nan.read().at(0)));
  EXPECT_THROW(train::QueuedScalars({at::zeros({2})}), strata::Error);
}
