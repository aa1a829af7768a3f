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
#include <map>
#include <memory>
#include <vector>

#include "common/GradClipReference.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "models/flux/FluxLayout.h"
#include "placement/OptimizerStateAttachment.h"
#include "train/FusedAdamW.h"
#include "train/GradClip.h"
#include "train/OptimizerState.h"

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

namespace {

torch::optim::AdamWParamState& adamState(train::FusedAdamW& opt, const at::Tensor& p) {
  return static_cast<torch::optim::AdamWParamState&>(*opt.state().at(compat::optimizerStateKey(p)));
}

// Kernels queued ahead of what follows, so a copy that does not wait reads too early.
void keepTheCardBusy() {
  const auto m = at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA, 0));
  for (int i = 0; i < 20; ++i) (void)at::mm(m, m);
}

}  // namespace

// train.offload_optimizer_state: FLUX.1-dev's LoRA moments in pinned host memory,
// staged to the card in chunks (two slots in turn) for the fused step. The same bits as
// moments kept on the card; the card's peak during the step lower by about the moments'
// bytes less the two slots; the copies back still running when step() returns behind a
// busy card, and landed for the state's save; the on-device skip leaves all as it was.
TEST(OptimizerGpu, OffloadedMomentsMatchOnDeviceMoments) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto shapes = loraShapes(flux::FluxConfig::fluxDev());
  int64_t momentBytes = 0;
  for (const auto& s : shapes) momentBytes += 2 * s[0] * s[1] * 4;
  auto onCard = makeParams(shapes, 5);
  auto offloaded = makeParams(shapes, 5);
  train::FusedAdamW cardOpt(onCard, options()), hostOpt(offloaded, options());
  hostOpt.setStateInHostMemory(true);
  // The offloaded steps first, then the on-card ones: the other's state is never on the card meanwhile,
  // and both sets of gradients are there in both phases.
  // Three steps of `opt` over `params`; the largest peak allocated inside a step.
  auto peakOverSteps = [&](train::FusedAdamW& opt, std::vector<at::Tensor>& params, bool staged) {
    int64_t peak = 0;
    for (int s = 0; s < 3; ++s) {
      setGrads(params, 400 + s);
      synchronize();
      resetPeak();
      opt.step();
      synchronize();
      peak = std::max(peak, peakAllocatedBytes());
      if (staged) EXPECT_GT(opt.lastStagedChunks(), 1) << "step " << s + 1;
    }
    return peak;
  };
  setGrads(onCard, 400);
  const int64_t hostPeak = peakOverSteps(hostOpt, offloaded, true);
  const int64_t cardPeak = peakOverSteps(cardOpt, onCard, false);
  EXPECT_EQ(hostOpt.lastPath(), cardOpt.lastPath());
  EXPECT_EQ(hostOpt.lastPath(), compat::kHasFusedAdamW ? "fused" : "foreach");
  std::cout << "[optimizer gpu] offloaded moments: " << shapes.size() << " tensors, " << gib(momentBytes)
            << " GiB of moments in " << hostOpt.lastStagedChunks() << " chunks; peak allocated during the step "
            << gib(cardPeak) << " GiB with them on the card, " << gib(hostPeak) << " GiB offloaded ("
            << gib(cardPeak - hostPeak) << " GiB less)" << std::endl;
  // Two slots of a chunk, and slack for the slots' alignment and the step's own tensors.
  EXPECT_GE(cardPeak - hostPeak, momentBytes - 3 * train::FusedAdamW::kDefaultStagingChunkBytes);
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSERT_TRUE(at::equal(offloaded[i].detach(), onCard[i].detach())) << "param " << i;
    const auto& h = adamState(hostOpt, offloaded[i]);
    const auto& c = adamState(cardOpt, onCard[i]);
    ASSERT_TRUE(h.exp_avg().is_cpu() && h.exp_avg().is_pinned()) << "param " << i;
    ASSERT_TRUE(h.exp_avg_sq().is_cpu() && h.exp_avg_sq().is_pinned()) << "param " << i;
    ASSERT_TRUE(at::equal(h.exp_avg(), c.exp_avg().cpu())) << "exp_avg " << i;
    ASSERT_TRUE(at::equal(h.exp_avg_sq(), c.exp_avg_sq().cpu())) << "exp_avg_sq " << i;
  }

  // Behind a busy card the copies back are still running when step() returns (step()
  // does not wait for them); the state's save waits for them, so it reads what landed.
  setGrads(offloaded, 410);
  setGrads(onCard, 410);
  keepTheCardBusy();
  hostOpt.step();
  EXPECT_TRUE(hostOpt.copiesBackPending());
  train::NamedParams named;
  for (size_t i = 0; i < shapes.size(); i += 37) named.emplace_back("p" + std::to_string(i), offloaded[i]);
  const auto saved = train::saveAdamWState(hostOpt, named);
  EXPECT_FALSE(hostOpt.copiesBackPending());
  std::map<std::string, at::Tensor> savedByName(saved.begin(), saved.end());
  cardOpt.step();
  for (size_t i = 0; i < shapes.size(); i += 37) {
    const std::string name = "p" + std::to_string(i);
    ASSERT_TRUE(at::equal(savedByName.at(name + ".exp_avg"), adamState(cardOpt, onCard[i]).exp_avg().cpu())) << name;
    ASSERT_TRUE(at::equal(savedByName.at(name + ".exp_avg_sq"), adamState(cardOpt, onCard[i]).exp_avg_sq().cpu()))
        << name;
  }

  // The on-device skip (a NaN gradient): parameters and host moments as they were.
  if (!hostOpt.canSkipOnDevice()) return;  // LibTorch before 2.1: no fused kernel to skip in
  std::vector<at::Tensor> params, avgs, sqs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(offloaded[i].detach().clone());
    avgs.push_back(adamState(hostOpt, offloaded[i]).exp_avg().clone());
    sqs.push_back(adamState(hostOpt, offloaded[i]).exp_avg_sq().clone());
  }
  setGrads(offloaded, 500);
  offloaded[11].mutable_grad()[0][0] = NAN;
  const auto norm = train::clipGradNormQueued(offloaded, 1.0);
  hostOpt.skipNextStepIfNotFinite(norm);
  hostOpt.step();
  hostOpt.finishCopiesBack();  // the host reads the moments next
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSERT_TRUE(at::equal(offloaded[i].detach(), params[i])) << "param " << i;
    ASSERT_TRUE(at::equal(adamState(hostOpt, offloaded[i]).exp_avg(), avgs[i])) << "exp_avg " << i;
    ASSERT_TRUE(at::equal(adamState(hostOpt, offloaded[i]).exp_avg_sq(), sqs[i])) << "exp_avg_sq " << i;
  }
  std::cout << "[optimizer gpu] offloaded moments: bit-equal to on-card moments over 4 steps, copies back pending when "
               "step() returns and landed for the save, a NaN gradient skipped the update"
            << std::endl;
}

// Checkpoints across the setting: a state saved from pinned host memory loads onto
// the card and one saved from the card loads into pinned host memory (through the
// placement attachment, as the trainer's resume does), bit for bit, and steps alike.
TEST(OptimizerGpu, OffloadedStateSavesAndLoadsEitherWay) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  auto shapes = loraShapes(flux::FluxConfig::fluxDev());
  shapes.resize(96);
  auto saved = makeParams(shapes, 7);
  train::FusedAdamW source(saved, options());
  source.setStateInHostMemory(true);
  train::NamedParams named;
  for (size_t i = 0; i < saved.size(); ++i) named.emplace_back("transformer_blocks.0.p" + std::to_string(i), saved[i]);
  for (int s = 0; s < 2; ++s) {
    setGrads(saved, 600 + s);
    source.step();
  }
  std::map<std::string, at::Tensor> file;
  for (const auto& [k, t] : train::saveAdamWState(source, named)) file[k] = t.clone();
  for (const bool intoHost : {false, true}) {
    SCOPED_TRACE(intoHost ? "into pinned host memory" : "onto the card");
    auto params = makeParams(shapes, 7);
    for (size_t i = 0; i < params.size(); ++i) {
      at::NoGradGuard ng;
      params[i].copy_(saved[i]);
    }
    train::NamedParams n2;
    for (size_t i = 0; i < params.size(); ++i) n2.emplace_back(named[i].first, params[i]);
    auto opt = std::make_shared<train::FusedAdamW>(params, options());
    opt->setStateInHostMemory(intoHost);
    train::loadAdamWState(*opt, n2, file);
    for (const auto& a : placement::OptimizerStateAttachment::forParameters(opt, n2, intoHost))
      a->moveTo(c10::Device(c10::kCUDA, 0));  // what Placement::placeAttachments does for the block on cuda:0
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& st = adamState(*opt, params[i]);
      ASSERT_EQ(st.exp_avg().is_cpu(), intoHost) << i;
      if (intoHost) ASSERT_TRUE(st.exp_avg().is_pinned() && st.exp_avg_sq().is_pinned()) << i;
      ASSERT_TRUE(at::equal(st.exp_avg().cpu(), adamState(source, saved[i]).exp_avg())) << i;
      ASSERT_TRUE(at::equal(st.exp_avg_sq().cpu(), adamState(source, saved[i]).exp_avg_sq())) << i;
    }
    auto ref = makeParams(shapes, 7);
    for (size_t i = 0; i < ref.size(); ++i) {
      at::NoGradGuard ng;
      ref[i].copy_(saved[i]);
    }
    // One more step of each from the same state: the same parameters.
    train::FusedAdamW cont(ref, options());
    train::NamedParams n3;
    for (size_t i = 0; i < ref.size(); ++i) n3.emplace_back(named[i].first, ref[i]);
    train::loadAdamWState(cont, n3, file);
    setGrads(params, 700);
    setGrads(ref, 700);
    opt->step();
    cont.step();
    for (size_t i = 0; i < params.size(); ++i) ASSERT_TRUE(at::equal(params[i], ref[i])) << i;
  }
}
