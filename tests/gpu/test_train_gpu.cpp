// GPU checks of the trainer (label gpu; they skip without CUDA): everything a
// run allocates is released at its end; a split over two GPUs with EMA passes
// the audit and trains; fp16 runs through the loss scaler.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "common/TestSupport.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::train;

namespace {

config::RunConfig gpuTiny(const std::filesystem::path& folder) {
  config::RunConfig c;
  c.job.name = "gpu_tiny";
  c.job.trainingFolder = folder.string();
  c.model.preset = "tiny";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.network.linear = 8;
  c.train.steps = 6;
  c.train.lr = 1e-3;
  c.train.dtype = config::DType::BF16;
  c.train.ema.useEma = true;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {128};
  d.numItems = 4;
  c.datasets = {d};
  c.sample.sampleEvery = 3;
  c.sample.prompts = {"a test"};
  c.sample.width = 128;
  c.sample.height = 128;
  c.sample.sampleSteps = 2;
  c.save.saveEvery = 3;
  return c;
}

int64_t allocated(int index) { return device::memoryFigures(index).allocatedBytes; }

// The allocator's statistics exist once a device has been used.
void touch(int index) {
  { auto t = at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(index))); }
  releaseDeviceCaches();
}

}  // namespace

TEST(TrainGpu, AllocatedMemoryReturnsToZeroAfterARun) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  touch(0);
  const int64_t before = allocated(0);
  events::EventBus bus;
  int64_t peak = 0;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e))
      for (const auto& m : s->memory) peak = std::max(peak, m.allocatedBytes);
  });
  Trainer t(gpuTiny(tmp.path()), bus);
  ASSERT_EQ(t.run(), RunOutcome::Finished);
  EXPECT_GT(peak, before);  // the run did use the GPU
  EXPECT_EQ(allocated(0), before) << "bytes left allocated on cuda:0 after the run";
  EXPECT_EQ(before, 0);
  EXPECT_EQ(device::memoryFigures(0).reservedBytes, 0) << "the CUDA cache was not emptied";
}

// The allocator's cap outlives a run unless the run puts it back: a run with
// model.gpu_memory_limit_gb caps the card while it runs and not after, and a run
// without one has the whole card even where a cap was set before it (and is put back).
TEST(TrainGpu, ACappedRunDoesNotCapTheNextRun) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  touch(0);
  auto runAndWatchTheCap = [](const config::RunConfig& cfg) {
    events::EventBus bus;
    int64_t during = -1;
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (std::holds_alternative<events::StepEvent>(e)) during = device::memoryCap(0);
    });
    EXPECT_EQ(Trainer(cfg, bus).run(), RunOutcome::Finished);
    return during;
  };
  auto capped = gpuTiny(tmp / "capped");
  capped.model.gpuMemoryLimitGb = {4.0};
  EXPECT_EQ(runAndWatchTheCap(capped), static_cast<int64_t>(4e9)) << "the capped run did not cap cuda:0";
  EXPECT_EQ(device::memoryCap(0), 0) << "the cap outlived its run";
  // The whole card is usable again: more than the old cap in one allocation.
  {
    const auto big = at::empty({static_cast<int64_t>(5e9)}, at::TensorOptions().device(at::kCUDA, 0).dtype(at::kByte));
    EXPECT_EQ(big.numel(), static_cast<int64_t>(5e9));
  }
  releaseDeviceCaches();
  device::setMemoryCap(0, static_cast<int64_t>(6e9));  // set outside any run (a test, an embedding program)
  EXPECT_EQ(runAndWatchTheCap(gpuTiny(tmp / "free")), 0) << "the run without a cap ran under an earlier cap";
  EXPECT_EQ(device::memoryCap(0), static_cast<int64_t>(6e9)) << "the cap set before the run was not put back";
  releaseDeviceCaches();
  EXPECT_ANY_THROW(at::empty({static_cast<int64_t>(7e9)}, at::TensorOptions().device(at::kCUDA, 0).dtype(at::kByte)))
      << "7 GB allocated under the 6 GB cap put back";
  device::setMemoryCap(0, 0);
}

TEST(TrainGpu, SplitOverTwoGpusWithEmaHasACleanAuditAndReleasesBoth) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  test::TempDir tmp;
  touch(0);
  touch(1);
  auto cfg = gpuTiny(tmp.path());
  cfg.model.splitModelOverGpus = true;
  cfg.model.gpuIds = {0, 1};
  events::EventBus bus;
  std::vector<events::PlacementEvent> placements;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* p = std::get_if<events::PlacementEvent>(&e)) placements.push_back(*p);
  });
  Trainer t(cfg, bus);
  ASSERT_EQ(t.run(), RunOutcome::Finished);
  // Before step 1, and again after it with the optimizer state step 1 made.
  ASSERT_EQ(placements.size(), 2u);
  for (const auto& p : placements) EXPECT_TRUE(p.audit.empty());
  std::set<std::string> devices;
  for (const auto& b : placements[0].blocks) devices.insert(b.device);
  EXPECT_EQ(devices, (std::set<std::string>{"cuda:0", "cuda:1"}));
  EXPECT_EQ(allocated(0), 0);
  EXPECT_EQ(allocated(1), 0);
}

// fp16 compute goes through the loss scaler: every step logs the scale it used,
// the loss stays finite, and the checkpoint keeps the scale for a resume.
TEST(TrainGpu, Fp16RunScalesTheLossAndCheckpointsTheScale) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto cfg = gpuTiny(tmp.path());
  cfg.train.dtype = config::DType::FP16;
  cfg.train.steps = 8;
  cfg.save.saveEvery = 4;
  events::EventBus bus;
  std::vector<events::StepEvent> steps;
  std::vector<std::string> warnings;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) steps.push_back(*s);
    if (auto* w = std::get_if<events::WarningEvent>(&e)) warnings.push_back(w->message);
  });
  TrainerOptions o;
  o.runDir = tmp / "run";
  Trainer t(cfg, bus, o);
  ASSERT_EQ(t.run(), RunOutcome::Finished);
  ASSERT_EQ(steps.size(), 8u);
  for (const auto& s : steps) EXPECT_TRUE(std::isfinite(s.loss)) << "step " << s.step;
  for (const auto& w : warnings) std::cout << "[fp16] warning: " << w << "\n";

  RunFolder folder(tmp / "run");
  std::ifstream metrics(folder.metricsPath());
  std::string line;
  int lines = 0, skipped = 0;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("loss_scale")) << line;
    EXPECT_GE(j["loss_scale"].get<double>(), 1.0);
    if (j.value("skipped", false)) ++skipped;
    ++lines;
  }
  EXPECT_EQ(lines, 8);
  EXPECT_LT(skipped, 8) << "every step overflowed";
  const auto latest = folder.latestCheckpoint();
  ASSERT_TRUE(latest);
  const auto data = readCheckpoint(latest->path);
  ASSERT_TRUE(data.state.contains("loss_scale"));
  std::cout << "[fp16] 8 steps, " << skipped << " skipped; checkpointed loss scale "
            << data.state["loss_scale"].get<double>() << "\n";
  EXPECT_EQ(allocated(0), 0);
}

// train.offload_optimizer_state through the trainer: a run with it stops and saves,
// then resumes with it (the loaded state goes to pinned host memory: the placement
// event counts it as host bytes, not the card's) or without it (back on the card);
// every audit is clean and the resumed runs train on.
TEST(TrainGpu, OffloadedOptimizerStateSavesResumesAndPassesTheAudit) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto cfg = gpuTiny(tmp.path());
  cfg.sample.sampleEvery = 0;
  cfg.train.offloadOptimizerState = true;
  for (const bool resumeWith : {true, false}) {
    SCOPED_TRACE(resumeWith ? "resumed with the option" : "resumed without it");
    const auto dir = tmp / (resumeWith ? "with" : "without");
    events::EventBus bus;
    std::vector<events::PlacementEvent> placements;
    std::vector<events::StepEvent> steps;
    std::string failures;
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (auto* p = std::get_if<events::PlacementEvent>(&e)) placements.push_back(*p);
      if (auto* s = std::get_if<events::StepEvent>(&e)) steps.push_back(*s);
      if (auto* f = std::get_if<events::FailedEvent>(&e)) failures += f->message + "\n";
      if (auto* f = std::get_if<events::PreflightFailedEvent>(&e))
        for (const auto& p : f->problems) failures += p + "\n";
    });
    TrainerOptions first;
    first.runDir = dir;
    first.stopAfterStep = 3;
    ASSERT_EQ(Trainer(cfg, bus, first).run(), RunOutcome::Stopped) << failures;
    auto second = cfg;
    second.train.offloadOptimizerState = resumeWith;
    TrainerOptions again;
    again.runDir = dir;
    again.resume = true;
    ASSERT_EQ(Trainer(second, bus, again).run(), RunOutcome::Finished) << failures;
    // The first run: before step 1 and after it (its optimizer state); the resumed one
    // loads that state before its audit, so step 1 adds nothing to audit again.
    ASSERT_EQ(placements.size(), 3u);
    for (const auto& p : placements) EXPECT_TRUE(p.audit.empty()) << p.audit.size() << " audit issues";
    int64_t onCard = 0, onHost = 0;
    for (const auto& b : placements[2].blocks) {
      for (const auto& a : b.attachments)
        if (a.kind == "optimizer_state") onCard += a.bytes;
      for (const auto& a : b.hostAttachments)
        if (a.kind == "optimizer_state") onHost += a.bytes;
    }
    std::cout << "[train gpu] offloaded optimizer state resumed " << (resumeWith ? "with" : "without")
              << " the option: " << onHost << " bytes of it in host memory, " << onCard << " on the card" << std::endl;
    EXPECT_EQ(onHost > 0, resumeWith);
    EXPECT_EQ(onCard > 0, !resumeWith);
    ASSERT_EQ(steps.size(), 6u);
    for (const auto& s : steps) EXPECT_TRUE(std::isfinite(s.loss)) << "step " << s.step;
    EXPECT_EQ(RunFolder(dir).latestCheckpoint()->step, 6);
  }
}
