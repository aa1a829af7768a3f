// adamw8bit (train/AdamW8bit.h): the 8-bit block format, the update against
// LibTorch's AdamW, independence from how parameters are chunked and padded,
// checkpoints in both directions, the placement attachment, and a whole CPU run
// with resume.
#include <gtest/gtest.h>

#include <cmath>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "placement/OptimizerStateAttachment.h"
#include "train/AdamW8bit.h"
#include "train/OptimizerState.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

torch::optim::AdamWOptions options(double lr = 1e-2) {
  torch::optim::AdamWOptions o(lr);
  o.betas(std::make_tuple(0.9, 0.999));
  o.eps(1e-8);
  o.weight_decay(0.01);
  return o;
}

// Values whose magnitudes spread over `decades` below the largest, both signs.
at::Tensor spread(int64_t n, double decades, uint64_t seed) {
  at::manual_seed(seed);
  const auto mag = at::pow(10.0, -decades * at::rand({n}, at::kDouble));
  const auto sign = at::where(at::rand({n}, at::kDouble) < 0.5, -1.0, 1.0);
  return (mag * sign).to(at::kFloat);
}

double relL2(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}

}  // namespace

TEST(AdamW8bit, TablesAreSortedAndSpanTheRange) {
  for (bool isSigned : {true, false}) {
    const auto t = blockwise8Table(isSigned, at::kCPU);
    ASSERT_EQ(t.numel(), 256);
    const auto diffs = t.narrow(0, 1, 255) - t.narrow(0, 0, 255);
    EXPECT_GT(diffs.min().item<float>(), 0.0f) << (isSigned ? "signed" : "unsigned");
    EXPECT_FLOAT_EQ(t[255].item<float>(), 1.0f);
    EXPECT_FLOAT_EQ(t[0].item<float>(), isSigned ? -1.0f : 0.0f);
    EXPECT_EQ(t[isSigned ? 127 : 0].item<float>(), 0.0f);
    EXPECT_LE(t[isSigned ? 128 : 1].item<float>(), 1.01e-7f);  // eight decades below the maximum
  }
}

TEST(AdamW8bit, RoundTripKeepsAFewPercentOverSixDecades) {
  const int64_t n = 64 * kBlock8;
  const auto x = spread(n, 6.0, 3);
  for (bool isSigned : {true, false}) {
    const auto v = isSigned ? x : x.abs();
    const auto q = quantizeBlockwise8(v, isSigned);
    ASSERT_EQ(q.codes.scalar_type(), at::kByte);
    ASSERT_EQ(q.codes.numel(), n);
    ASSERT_EQ(q.absmax.numel(), n / kBlock8);
    const auto back = dequantizeBlockwise8(q.codes, q.absmax, isSigned);
    const auto rel = (back - v).abs() / v.abs();
    // Half a step of the table: 2.5% (signed) / 1.2% (unsigned) in the decade just
    // below a block's maximum; in the sparse decades below 10^-4 of it, steps of 78%
    // (signed) / 39% (unsigned) leave up to 28% / 16%.
    const auto top = v.abs().view({-1, kBlock8}) >= q.absmax.view({-1, 1}) * 0.1;
    EXPECT_LT(rel.view({-1, kBlock8}).masked_select(top).max().item<double>(), isSigned ? 0.026 : 0.013);
    EXPECT_LT(rel.max().item<double>(), isSigned ? 0.29 : 0.17) << (isSigned ? "signed" : "unsigned");
    EXPECT_LT(rel.mean().item<double>(), 0.08) << (isSigned ? "signed" : "unsigned");
    EXPECT_TRUE(at::equal(back.sign(), v.sign()));  // no value changes sign or becomes zero
  }
  // A tiny positive second moment never reads back as zero; a zero block stays zero.
  auto v = at::zeros({2 * kBlock8});
  v[0] = 1.0f;
  v[1] = 1e-20f;
  const auto q = quantizeBlockwise8(v, false);
  const auto back = dequantizeBlockwise8(q.codes, q.absmax, false);
  EXPECT_GT(back[1].item<float>(), 0.0f);
  EXPECT_EQ(back.narrow(0, kBlock8, kBlock8).abs().sum().item<float>(), 0.0f);
  EXPECT_THROW(quantizeBlockwise8(at::zeros({kBlock8 + 1}), false), Error);
  EXPECT_THROW(quantizeBlockwise8(at::zeros({kBlock8}, at::kDouble), false), Error);
}

// The first step, where the moments are (1 - beta) g and (1 - beta2) g^2: the
// update is AdamW's up to the moments' rounding.
TEST(AdamW8bit, OneStepMatchesAdamW) {
  at::manual_seed(1);
  const auto init = at::randn({48, 64});
  const auto grad = at::randn({48, 64}) * spread(48 * 64, 3.0, 2).view({48, 64});
  auto a = init.clone().requires_grad_(true);
  auto b = init.clone().requires_grad_(true);
  torch::optim::AdamW ref({a}, options());
  AdamW8bit q8({b}, options());
  a.mutable_grad() = grad.clone();
  b.mutable_grad() = grad.clone();
  ref.step();
  q8.step();
  const auto da = a.detach() - init, db = b.detach() - init;
  EXPECT_LT(relL2(db, da), 0.05);
  EXPECT_GT(da.abs().sum().item<double>(), 0.0);
  auto* s = q8.stateOf(b);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->step, 1);
  EXPECT_LT(relL2(s->expAvg(b), grad * 0.1), 0.05);
}

// A least-squares fit over 300 steps: the 8-bit curve stays with AdamW's.
TEST(AdamW8bit, LossCurveStaysCloseToAdamW) {
  at::manual_seed(7);
  const auto x = at::randn({256, 32});
  const auto wTrue = at::randn({32, 8});
  const auto y = at::mm(x, wTrue) + 0.01 * at::randn({256, 8});
  auto wa = at::zeros({32, 8}).requires_grad_(true);
  auto wb = at::zeros({32, 8}).requires_grad_(true);
  torch::optim::AdamW ref({wa}, options(3e-2));
  AdamW8bit q8({wb}, options(3e-2));
  double first = 0, lastA = 0, lastB = 0, worstGap = 0;
  for (int step = 0; step < 300; ++step) {
    for (auto* pair : {&wa, &wb}) {
      auto& w = *pair;
      w.mutable_grad() = at::Tensor();
      const auto loss = (at::mm(x, w) - y).pow(2).mean();
      loss.backward();
      const double l = loss.item<double>();
      if (step == 0) first = l;
      (pair == &wa ? lastA : lastB) = l;
    }
    ref.step();
    q8.step();
    // While the loss falls (above 1% of where it started) the curves stay within 10%;
    // near the noise floor both jitter and only the end point is compared.
    if (lastA > 0.01 * first) worstGap = std::max(worstGap, std::abs(lastB - lastA) / lastA);
  }
  EXPECT_LT(lastA, first * 0.01);  // the fit converged
  EXPECT_LT(lastB, first * 0.01);
  EXPECT_LT(worstGap, 0.10) << "8-bit loss " << lastB << ", AdamW " << lastA;
  EXPECT_LT(lastB, 2.0 * lastA) << "8-bit loss " << lastB << ", AdamW " << lastA;
}

// Parameters are stepped in chunks and padded to whole blocks: the result of each
// must not depend on which others share its chunk.
TEST(AdamW8bit, ChunkingAndPaddingDoNotChangeAParametersStep) {
  at::manual_seed(4);
  std::vector<at::Tensor> inits = {at::randn({3, 5}), at::randn({300}), at::randn({16, 64}), at::randn({1})};
  std::vector<at::Tensor> together, alone;
  for (const auto& t : inits) {
    together.push_back(t.clone().requires_grad_(true));
    alone.push_back(t.clone().requires_grad_(true));
  }
  AdamW8bit joint(together, options());
  std::vector<std::unique_ptr<AdamW8bit>> single;
  for (auto& p : alone) single.push_back(std::make_unique<AdamW8bit>(std::vector<at::Tensor>{p}, options()));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < inits.size(); ++i) {
      const auto g = at::randn(inits[i].sizes());
      together[i].mutable_grad() = g.clone();
      alone[i].mutable_grad() = g.clone();
    }
    joint.step();
    for (auto& o : single) o->step();
  }
  for (size_t i = 0; i < inits.size(); ++i) EXPECT_TRUE(at::equal(together[i], alone[i])) << i;
}

TEST(AdamW8bit, StateIsAQuarterOfAdamWs) {
  auto p = at::zeros({16, 3072}).requires_grad_(true);
  AdamW8bit q8({p}, options());
  p.mutable_grad() = at::randn({16, 3072});
  q8.step();
  int64_t bytes = 0;
  for (const auto& [name, t] : q8.stateOf(p)->stateTensors()) bytes += t.numel() * t.element_size();
  const int64_t adamw = 2 * p.numel() * 4;
  EXPECT_EQ(bytes, 2 * p.numel() + 2 * (p.numel() / kBlock8) * 4);
  EXPECT_LT(bytes * 3, adamw);
  EXPECT_DOUBLE_EQ(optimizerStateBytesPerParam(true, 4) * static_cast<double>(p.numel()), static_cast<double>(bytes));
}

TEST(AdamW8bit, AmsgradIsRefused) {
  auto p = at::zeros({4}).requires_grad_(true);
  auto o = options();
  o.amsgrad(true);
  EXPECT_THROW(AdamW8bit(std::vector<at::Tensor>{p}, o), ConfigError);
}

// A checkpoint of the 8-bit state resumes bit-equal; a plain AdamW checkpoint
// loads into adamw8bit (quantized) and the other way (dequantized).
TEST(AdamW8bit, CheckpointsLoadIntoEitherOptimizer) {
  at::manual_seed(9);
  auto p = at::randn({10, 30}).requires_grad_(true);
  NamedParams named{{"w", p}};
  AdamW8bit q8({p}, options());
  for (int i = 0; i < 3; ++i) {
    p.mutable_grad() = at::randn({10, 30});
    q8.step();
  }
  const auto saved = saveAdamWState(q8, named);
  std::map<std::string, at::Tensor> byName(saved.begin(), saved.end());
  EXPECT_TRUE(byName.count("w.exp_avg.blockwise8"));
  EXPECT_TRUE(byName.count("w.exp_avg_sq.blockwise8_absmax"));
  EXPECT_FALSE(byName.count("w.exp_avg"));
  EXPECT_EQ(byName.at("w.step").item<int64_t>(), 3);

  // 8-bit -> 8-bit: the next step is the same as the uninterrupted one.
  auto p2 = p.detach().clone().requires_grad_(true);
  AdamW8bit resumed({p2}, options());
  loadAdamWState(resumed, {{"w", p2}}, byName);
  const auto g = at::randn({10, 30});
  p.mutable_grad() = g.clone();
  p2.mutable_grad() = g.clone();
  q8.step();
  resumed.step();
  EXPECT_TRUE(at::equal(p, p2));

  // 8-bit -> AdamW: dequantized moments, the step count kept.
  auto p3 = p.detach().clone().requires_grad_(true);
  torch::optim::AdamW plain({p3}, options());
  const auto again = saveAdamWState(q8, named);
  loadAdamWState(plain, {{"w", p3}}, std::map<std::string, at::Tensor>(again.begin(), again.end()));
  const auto plainSaved = saveAdamWState(plain, {{"w", p3}});
  std::map<std::string, at::Tensor> plainByName(plainSaved.begin(), plainSaved.end());
  EXPECT_EQ(plainByName.at("w.step").item<int64_t>(), 4);
  EXPECT_TRUE(at::allclose(plainByName.at("w.exp_avg"), q8.stateOf(p)->expAvg(p)));

  // AdamW -> 8-bit: quantized on load.
  auto p4 = p.detach().clone().requires_grad_(true);
  AdamW8bit fromPlain({p4}, options());
  loadAdamWState(fromPlain, {{"w", p4}}, plainByName);
  ASSERT_NE(fromPlain.stateOf(p4), nullptr);
  EXPECT_EQ(fromPlain.stateOf(p4)->step, 4);
  EXPECT_LT(relL2(fromPlain.stateOf(p4)->expAvgSq(p4), plainByName.at("w.exp_avg_sq")), 0.05);

  // Damaged 8-bit state is refused naming the parameter.
  auto bad = byName;
  bad["w.exp_avg.blockwise8"] = at::zeros({7}, at::kByte);
  try {
    loadAdamWState(resumed, {{"w", p2}}, bad);
    FAIL() << "mis-shaped 8-bit state loaded";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("mis-shaped 8-bit moments: w"), std::string::npos) << e.what();
  }
  bad = byName;
  bad.erase("w.exp_avg_sq.blockwise8_absmax");
  EXPECT_THROW(loadAdamWState(resumed, {{"w", p2}}, bad), LoadError);
}

// Placement audits and moves the 8-bit state through the attachment.
TEST(AdamW8bit, TheAttachmentNamesAndMovesTheState) {
  auto p = at::randn({8, 40}).requires_grad_(true);
  auto q8 = std::make_shared<AdamW8bit>(std::vector<at::Tensor>{p}, options());
  placement::OptimizerStateAttachment att("blocks.0.lora_A.weight", q8, p);
  EXPECT_TRUE(att.tensors().empty());  // no state before the first step
  p.mutable_grad() = at::randn({8, 40});
  q8->step();
  const auto named = att.tensors();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "exp_avg.blockwise8");
  att.moveTo(at::Device(at::kCPU));
  for (const auto& [name, t] : att.tensors()) EXPECT_TRUE(t.device().is_cpu()) << name;
}

// A whole CPU run with adamw8bit: the loss falls, and a run stopped and resumed
// ends where the straight one does.
TEST(AdamW8bit, TrainerRunResumesOnTheSameCurve) {
  test::TempDir tmp;
  auto c = test::tinyCpuRun("tiny8", tmp.path(), 12);
  c.train.optimizer = config::OptimizerType::AdamW8bit;
  c.train.seed = 5;
  c.datasets = {test::shapesDataset(16, 8)};
  c.save.saveEvery = 6;

  events::EventBus busA, busB;
  test::EventRecorder rec;
  auto sub = busB.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions a;
  a.runDir = tmp / "straight";
  ASSERT_EQ(Trainer(c, busA, a).run(), RunOutcome::Finished);
  TrainerOptions b;
  b.runDir = tmp / "split";
  b.stopAfterStep = 6;
  ASSERT_EQ(Trainer(c, busB, b).run(), RunOutcome::Stopped);
  ASSERT_EQ(Trainer::resumeFrom(tmp / "split", busB)->run(), RunOutcome::Finished) << rec.failures();

  RunFolder fa(tmp / "straight"), fb(tmp / "split");
  const auto ca = fa.latestCheckpoint(), cb = fb.latestCheckpoint();
  ASSERT_TRUE(ca && cb);
  const auto la = io::loadSafetensors(ca->path / "lora.safetensors");
  const auto lb = io::loadSafetensors(cb->path / "lora.safetensors");
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [k, t] : la) EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << k;
  const auto ma = fa.readMetrics();
  ASSERT_EQ(ma.size(), 12u);
  double early = 0, late = 0;
  for (size_t i = 0; i < 4; ++i) early += ma[i]["loss"].get<double>();
  for (size_t i = 8; i < 12; ++i) late += ma[i]["loss"].get<double>();
  EXPECT_LT(late, early);  // it trains
  // The checkpoint holds the 8-bit moments, not float ones.
  bool eightBit = false;
  for (const auto& entry : fs::directory_iterator(ca->path))
    if (entry.path().extension() == ".safetensors")
      for (const auto& [k, t] : io::loadSafetensors(entry.path()))
        if (k.find(".blockwise8") != std::string::npos) eightBit = true;
  EXPECT_TRUE(eightBit);
}
