// Placement on real GPUs: tensors move between cuda:0 and cuda:1, the split
// model computes what the one-device model computes, caps turn an OOM into a
// PlacementError, and (with STRATA_RUN_PROOF=1) a FLUX.1-dev-sized LoRA run with
// EMA trains split over two GPUs capped at 20 GB each (the 16 GB setup of the bug report, on bigger cards).
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "device/DeviceInventory.h"
#include "lora/LoraAdapter.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "placement/MeasureBlocks.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/Placement.h"
#include "train/CheckpointedRunner.h"
#include "train/Ema.h"
#include "../placement/ToyModel.h"
#include "common/TestSupport.h"

using namespace strata;
using namespace strata::placement;
using strata::test::addToyAdapters;
using strata::test::RecordingBlock;
using strata::test::ToyAdapters;
using strata::test::ToyModel;

namespace {

const c10::Device kGpu0(c10::kCUDA, 0);
const c10::Device kGpu1(c10::kCUDA, 1);

// First half of the blocks on cuda:0, the rest on cuda:1; stem and head on cuda:0.
std::unique_ptr<Placement> twoGpuPlacement(nn::BlockList list) {
  const size_t n = list.blocks.size();
  std::vector<c10::Device> devs;
  for (size_t i = 0; i < n; ++i) devs.push_back(i < n / 2 ? kGpu0 : kGpu1);
  return std::make_unique<Placement>(std::move(list), devs, kGpu0, kGpu0);
}

}  // namespace

TEST(PlacementGpuSeedBug1, AdaptersCreatedBeforeTheSplitEndUpWithTheirHost) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  ToyModel model(8, 32, 4);
  model.to(kGpu0);  // everything on the default device, as before the split
  ToyAdapters lora = addToyAdapters(model, 4);
  auto p = twoGpuPlacement(model.blockList());
  p->attachAll(lora.attachments);
  p->apply();
  for (const auto& a : lora.adapters) EXPECT_EQ(a->device(), a->host()->weight.device()) << a->hostPath();
  EXPECT_EQ(lora.adapters.back()->device(), kGpu1);
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  // The first forward, the seed's crash point, runs.
  const at::Tensor y =
      model.forward(at::randn({2, 5, 8}, kGpu0), at::randn({2, 3, 32}, kGpu0), at::randn({2, 32}, kGpu0), *p);
  EXPECT_EQ(y.device(), kGpu0);
}

TEST(PlacementGpuSeedBug2, AdaptersFollowEveryLaterMove) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  ToyModel model(8, 32, 4);
  ToyAdapters lora = addToyAdapters(model, 4);
  auto p = twoGpuPlacement(model.blockList());
  p->attachAll(lora.attachments);
  p->apply();
  for (const auto& target : {kGpu0, kGpu1, c10::Device(c10::kCPU), kGpu1}) {
    p->moveBlock("blocks.3", target);
    for (const auto& a : lora.adapters) EXPECT_EQ(a->device(), a->host()->weight.device()) << a->hostPath();
    ASSERT_TRUE(p->audit().empty()) << formatAudit(p->audit());
    model.forward(at::randn({1, 5, 8}, kGpu0), at::randn({1, 3, 32}, kGpu0), at::randn({1, 32}, kGpu0), *p);
  }
  lora.adapters.back()->moveTo(kGpu0);  // behind Placement's back
  const auto issues = p->audit();
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].expected, "cuda:1");
  EXPECT_EQ(issues[0].actual, "cuda:0");
}

TEST(PlacementGpuSeedBug3, MultiplierWorksFromAnyDevice) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  auto mult = std::make_shared<lora::LoraMultiplier>();
  mult->set(at::tensor({0.5f, 2.0f}));  // network-level, on the cpu
  ToyModel model(8, 32, 4);
  ToyAdapters lora = addToyAdapters(model, 4, mult);
  for (auto& a : lora.adapters) {
    at::NoGradGuard g;
    a->up.normal_();
  }
  auto p = twoGpuPlacement(model.blockList());
  p->attachAll(lora.attachments);
  p->apply();
  const at::Tensor y =
      model.forward(at::randn({2, 5, 8}, kGpu0), at::randn({2, 3, 32}, kGpu0), at::randn({2, 32}, kGpu0), *p);
  y.sum().backward();
  const auto& fc1 = lora.adapters[lora.adapters.size() - 3];  // blocks.3.fc1, on cuda:1
  ASSERT_TRUE(fc1->down.grad().defined());
  EXPECT_EQ(fc1->down.grad().device(), kGpu1);
  // Moving the multiplier to cuda:0 (the seed's default device) changes nothing either.
  mult->set(mult->perSample().to(kGpu0));
  EXPECT_NO_THROW(
      model.forward(at::randn({2, 5, 8}, kGpu0), at::randn({2, 3, 32}, kGpu0), at::randn({2, 32}, kGpu0), *p));
}

TEST(PlacementGpuSeedBug4, RelayCarriesEveryFieldAcrossCards) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  auto rec = std::make_shared<RecordingBlock>();
  nn::BlockList list;
  list.stem = nn::BlockSlot{"stem", "stem", {}, nullptr};
  list.blocks.push_back(nn::BlockSlot{"blocks.0", "single", {{"blocks.0", rec}}, rec});
  list.head = nn::BlockSlot{"head", "head", {}, nullptr};
  Placement p(list, {kGpu1}, kGpu0, kGpu0);
  p.apply();
  nn::BlockIO io{at::randn({1, 4, 8}, kGpu0), at::randn({1, 3, 8}, kGpu0),
                 at::randn({1, 8}, kGpu0),    at::randn({7, 4}, kGpu0),
                 at::randn({7, 4}, kGpu0),    at::ones({1, 7}, at::TensorOptions(kGpu0).dtype(at::kBool))};
  const nn::BlockIO out = p.run(0, *rec, io);
  for (const auto& d : rec->seen) EXPECT_EQ(d, "cuda:1");
  const nn::BlockIO back = p.toHead(out);
  for (const auto& f : back.fields()) EXPECT_EQ(f.device(), kGpu0);
}

TEST(PlacementGpuSeedBug5, EmaShadowsSitOnTheirParametersDevice) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  ToyModel model(8, 32, 4);
  model.to(kGpu0);
  ToyAdapters lora = addToyAdapters(model, 4);
  auto p = twoGpuPlacement(model.blockList());
  p->attachAll(lora.attachments);
  p->apply();
  train::Ema ema(lora.namedParams(), train::EmaOptions{0.9, 1});
  ema.registerWith(*p);
  int onGpu1 = 0;
  for (size_t i = 0; i < ema.size(); ++i) {
    EXPECT_EQ(ema.shadow(i).device(), p->deviceOf(ema.path(i))) << ema.path(i);
    onGpu1 += ema.shadow(i).device() == kGpu1;
  }
  EXPECT_GT(onGpu1, 0);
  EXPECT_NO_THROW(ema.updateNow());  // the seed's crash: shadow on cuda:0, param on cuda:1
  p->moveBlock("blocks.0", kGpu1);
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  EXPECT_NO_THROW(ema.updateNow());
}

TEST(PlacementGpuEquality, ToySplitEqualsOneDevice) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  torch::manual_seed(5);
  ToyModel a(8, 64, 6), b(8, 64, 6);
  test::copyWeights(a, b);
  a.to(kGpu0);
  ToyAdapters la = addToyAdapters(a, 8), lb = addToyAdapters(b, 8);
  for (size_t i = 0; i < la.adapters.size(); ++i) {
    at::NoGradGuard g;
    la.adapters[i]->up.normal_(0, 0.1);
    lb.adapters[i]->setWeights(la.adapters[i]->down, la.adapters[i]->up);
  }
  auto p = twoGpuPlacement(b.blockList());
  p->attachAll(lb.attachments);
  p->apply();
  const at::Tensor x = at::randn({2, 7, 8}, kGpu0), txt = at::randn({2, 3, 64}, kGpu0),
                   temb = at::randn({2, 64}, kGpu0);
  nn::LocalRunner local;
  const at::Tensor ya = a.forward(x, txt, temb, local);
  const at::Tensor yb = b.forward(x, txt, temb, *p);
  EXPECT_TRUE(test::allClose(yb, ya, 1e-6, 1e-5));
  ya.pow(2).mean().backward();
  yb.pow(2).mean().backward();
  for (size_t i = 0; i < la.adapters.size(); ++i) {
    ASSERT_EQ(la.adapters[i]->down.grad().defined(), lb.adapters[i]->down.grad().defined());
    if (!la.adapters[i]->down.grad().defined()) continue;  // the last block's txt_proj: unused
    EXPECT_TRUE(test::allClose(lb.adapters[i]->down.grad().to(kGpu0), la.adapters[i]->down.grad(), 1e-6, 1e-5));
    EXPECT_TRUE(test::allClose(lb.adapters[i]->up.grad().to(kGpu0), la.adapters[i]->up.grad(), 1e-6, 1e-5));
  }
}

namespace {
flux::FluxInputs tinyInputs(const flux::FluxConfig& cfg, int64_t batch, int64_t side, int64_t txtLen,
                            const c10::Device& device, at::ScalarType dtype) {
  flux::FluxInputs in;
  const auto o = at::TensorOptions().device(device).dtype(dtype);
  in.img = at::randn({batch, side * side, cfg.inChannels}, o);
  in.txt = at::randn({batch, txtLen, cfg.jointAttentionDim}, o);
  in.pooled = at::randn({batch, cfg.pooledProjectionDim}, o);
  in.timestep = at::rand({batch}, o);
  in.guidance = at::full({batch}, 1.0, o);
  auto rows = at::arange(side, at::TensorOptions().device(device).dtype(at::kFloat)).repeat_interleave(side);
  auto cols = at::arange(side, at::TensorOptions().device(device).dtype(at::kFloat)).repeat({side});
  in.imgIds = at::stack({at::zeros_like(rows), rows, cols}, 1);  // [N_img, 3]
  in.txtIds = at::zeros({txtLen, 3}, at::TensorOptions().device(device).dtype(at::kFloat));
  return in;
}
}  // namespace

TEST(PlacementGpuEquality, FluxTinyWithLoraSplitEqualsOneDevice) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  torch::manual_seed(7);
  const auto cfg = flux::FluxConfig::tiny();
  flux::FluxTransformer a(cfg, flux::FluxBuildOptions{kGpu0, at::kFloat});
  flux::FluxTransformer b(cfg, flux::FluxBuildOptions{at::kCPU, at::kFloat});
  test::copyWeights(a, b);
  lora::LoraConfig lc;
  lc.rank = 4;
  auto na = lora::LoraNetwork::create(a, lc, flux::FluxLoraRules(cfg));
  auto nb = lora::LoraNetwork::create(b, lc, flux::FluxLoraRules(cfg));
  for (const auto& ad : na->adapters()) {
    at::NoGradGuard g;
    ad->up.normal_(0, 0.05);
    nb->adapter(ad->hostPath())->setWeights(ad->down, ad->up);
  }
  auto p = twoGpuPlacement(b.blockList());
  p->attachAll(nb->attachments());
  p->apply();
  ASSERT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  const auto in = tinyInputs(cfg, 2, 4, 5, kGpu0, at::kFloat);
  const at::Tensor ya = a.forward(in, nullptr);
  const at::Tensor yb = b.forward(in, p.get());
  EXPECT_EQ(yb.device(), kGpu0);
  EXPECT_TRUE(test::allClose(yb, ya, 1e-5, 1e-4));
  ya.pow(2).mean().backward();
  yb.pow(2).mean().backward();
  for (const auto& ad : na->adapters()) {
    const auto bd = nb->adapter(ad->hostPath());
    ASSERT_TRUE(bd->down.grad().defined()) << ad->hostPath();
    EXPECT_TRUE(test::allClose(bd->down.grad().to(kGpu0), ad->down.grad(), 1e-5, 1e-4)) << ad->hostPath();
    EXPECT_TRUE(test::allClose(bd->up.grad().to(kGpu0), ad->up.grad(), 1e-5, 1e-4)) << ad->hostPath();
  }
}

TEST(PlacementGpuMemoryCap, OutOfMemoryUnderACapNamesDeviceAndCap) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  device::setMemoryCap(1, 2000000000LL);  // 2 GB on cuda:1
  EXPECT_EQ(device::memoryCap(1), 2000000000LL);
  try {
    device::withCapContext("test allocation", [] {
      return at::empty({4000000000LL}, at::TensorOptions().device(kGpu1).dtype(at::kByte));
    });
    ADD_FAILURE() << "4 GB under a 2 GB cap did not fail";
  } catch (const PlacementError& e) {
    const std::string msg = e.what();
    std::cout << msg << "\n";
    EXPECT_NE(msg.find("cuda:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cap 2.0 GB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("while allocating"), std::string::npos) << msg;
  }
  // Under the cap it works; figures come from the allocator.
  const at::Tensor t = at::empty({500000000LL}, at::TensorOptions().device(kGpu1).dtype(at::kByte));
  const auto f = device::memoryFigures(1);
  EXPECT_TRUE(f.known);
  EXPECT_GE(f.allocatedBytes, 500000000LL);
  EXPECT_GE(f.reservedBytes, f.allocatedBytes);
  EXPECT_GT(f.totalBytes, 2000000000LL);
  device::setMemoryCap(1, 0);
  EXPECT_EQ(device::memoryCap(1), 0);
  const auto devs = device::listDevices();
  ASSERT_GE(devs.size(), 2u);
  EXPECT_GT(devs[1].totalBytes, 0);
  EXPECT_FALSE(devs[1].name.empty());
}

namespace {
void printSnapshot(const PlacementSnapshot& snap) {
  for (const auto& d : snap.devices) {
    std::cout << "  " << d.device << ": " << d.blocks.size() << " blocks (" << d.blocks.front().id << " .. "
              << d.blocks.back().id << "), weights " << device::formatBytes(d.weightBytes);
    for (const auto& k : d.attachments.kinds)
      std::cout << ", " << k.kind << " " << k.count << " / " << device::formatBytes(k.bytes);
    std::cout << "; memory allocated " << device::formatBytes(d.memory.allocatedBytes) << ", reserved "
              << device::formatBytes(d.memory.reservedBytes) << ", cap " << device::formatBytes(d.memory.capBytes)
              << ", total " << device::formatBytes(d.memory.totalBytes) << "\n";
  }
}
}  // namespace

// Issue 4, item 9. Takes a few minutes: run with STRATA_RUN_PROOF=1.
TEST(PlacementGpuProof, FluxDevSizedLoraEmaSplitOverTwoCappedGpus) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  if (std::getenv("STRATA_RUN_PROOF") == nullptr) GTEST_SKIP() << "set STRATA_RUN_PROOF=1 to run the proof";
  compat::disableCudnnAttention();  // flash, as when the proof was first run (docs/design.md §4)
  const int64_t kCapBytes = 20000000000LL;
  const int steps = std::getenv("STRATA_PROOF_STEPS") ? std::atoi(std::getenv("STRATA_PROOF_STEPS")) : 20;
  const int64_t side = std::getenv("STRATA_PROOF_SIDE") ? std::atoll(std::getenv("STRATA_PROOF_SIDE")) : 32;
  device::applyMemoryCaps({0, 1}, {20.0});
  const auto t0 = std::chrono::steady_clock::now();
  auto secondsSince = [](auto t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };

  // FLUX.1-dev shape, random bf16 weights, built on the cpu (23.8 GB) so neither capped card holds it whole.
  torch::manual_seed(11);
  const auto cfg = flux::FluxConfig::fluxDev();
  flux::FluxTransformer model(cfg, flux::FluxBuildOptions{at::kCPU, at::kBFloat16});
  // LoRA before the split: the seed's order (bug 1); Placement moves them with their hosts.
  lora::LoraConfig lc;
  lc.rank = 16;
  lc.alpha = 16;
  auto network = lora::LoraNetwork::create(model, lc, flux::FluxLoraRules(cfg));
  std::cout << "[proof] built FLUX.1-dev-sized model (" << cfg.numLayers << " double + " << cfg.numSingleLayers
            << " single blocks) + " << network->adapters().size() << " LoRA adapters (rank 16, "
            << network->numParameters() << " params) in " << secondsSince(t0) << " s\n";

  // Plan in memory mode with the real budgets (caps minus reserve).
  const ModelShapes shapes =
      measureBlocks(model.blockList(), [&](const std::string& path) { return network->adapter(path) != nullptr; });
  CostOptions co;
  co.loraRank = 16;
  co.ema = true;
  co.tokens = side * side + 512;
  co.hiddenSize = cfg.hiddenSize();
  PlannerInput in = estimateInput(shapes.stem, shapes.blocks, shapes.head, co);
  in.mode = PlanMode::Memory;
  in.devices = makeBudgets(device::listDevices(), {20.0}, 1.0);
  in.devices.resize(2);
  const Plan plan = planPlacement(in);
  std::cout << formatPlan(plan);
  requireFits(plan);

  Placement placement(model.blockList(), plan);
  placement.attachAll(network->attachments());
  placement.apply();
  std::cout << "[proof] placed in " << secondsSince(t0) << " s\n";

  // Optimizer and EMA after placement (§2.5), both registered.
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& kv : network->stateDict("")) named.emplace_back(kv.first, kv.second);
  auto opt = std::make_shared<torch::optim::AdamW>(network->parameters(), torch::optim::AdamWOptions(1e-4));
  placement.attachAll(OptimizerStateAttachment::forParameters(opt, named));
  train::Ema ema(named, train::EmaOptions{0.99, 1});
  ema.registerWith(placement);

  auto issues = placement.audit();
  std::cout << "[proof] audit before step 1: " << issues.size() << " issue(s)\n" << formatAudit(issues);
  ASSERT_TRUE(issues.empty());

  train::CheckpointedRunner runner(placement);
  const c10::Device stem = placement.stemDevice();
  double firstLoss = 0, lastLoss = 0;
  for (int step = 1; step <= steps; ++step) {
    const auto ts = std::chrono::steady_clock::now();
    device::withCapContext("proof step " + std::to_string(step), [&] {
      const auto inputs = tinyInputs(cfg, 1, side, 512, stem, at::kBFloat16);
      const at::Tensor target = at::randn_like(inputs.img);
      const at::Tensor out = model.forward(inputs, &runner);  // [1, N_img, 64]
      const at::Tensor loss = at::mse_loss(out.to(at::kFloat), target.to(at::kFloat));
      opt->zero_grad();
      loss.backward();
      opt->step();
      ema.update(step);
      const double l = loss.item<double>();
      if (step == 1) firstLoss = l;
      lastLoss = l;
      return 0;
    });
    std::cout << "[proof] step " << step << " loss " << lastLoss << " in " << secondsSince(ts) << " s\n";
  }
  issues = placement.audit();
  std::cout << "[proof] audit after step " << steps << ": " << issues.size() << " issue(s)\n" << formatAudit(issues);
  EXPECT_TRUE(issues.empty());
  std::cout << "[proof] snapshot:\n";
  const PlacementSnapshot snap = placement.snapshot();
  printSnapshot(snap);
  for (const auto& d : snap.devices) {
    EXPECT_GT(d.attachments.count("lora_adapter"), 0) << d.device;
    EXPECT_GT(d.attachments.count("ema_shadow"), 0) << d.device;
    EXPECT_GT(d.attachments.bytes("optimizer_state"), 0) << d.device;
    EXPECT_LE(d.memory.reservedBytes, kCapBytes) << d.device;
  }
  std::cout << "[proof] loss " << firstLoss << " -> " << lastLoss << ", total " << secondsSince(t0) << " s\n";
}
