// model.arch: flux2 through the Trainer on CUDA (label gpu; skips without CUDA):
// the tiny FLUX.2 preset split over two GPUs with EMA passes the placement audit
// (adapters, EMA and optimizer state on their block's device), uses both cards,
// gives the losses of a one-GPU run of the same config and releases both cards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::train;

namespace {

config::RunConfig flux2Tiny(const std::filesystem::path& folder) {
  config::RunConfig c;
  c.job.name = "flux2_gpu";
  c.job.trainingFolder = folder.string();
  c.model.arch = std::string("flux2");
  c.model.preset = "tiny";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.network.linear = 8;
  c.train.steps = 8;
  c.train.lr = 1e-3;
  c.train.dtype = config::DType::FP32;  // the split and the one-GPU run compared closely
  c.train.batchSize = 2;
  c.train.ema.useEma = true;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {128};
  d.numItems = 4;
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  c.save.saveEvery = 4;
  c.save.exportFormats = {config::ExportFormat::Diffusers};
  return c;
}

int64_t allocated(int index) { return device::memoryFigures(index).allocatedBytes; }

void touch(int index) {
  { auto t = at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(index))); }
  releaseDeviceCaches();
}

}  // namespace

TEST(Flux2TrainGpu, SplitOverTwoGpusWithEmaEqualsOneGpuAndReleasesBoth) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  test::TempDir tmp;
  touch(0);
  touch(1);
  auto one = flux2Tiny(tmp.path());
  events::EventBus busOne;
  TrainerOptions a;
  a.runDir = tmp / "one";
  ASSERT_EQ(Trainer(one, busOne, a).run(), RunOutcome::Finished);

  auto split = one;
  split.model.splitModelOverGpus = true;
  split.model.gpuIds = {0, 1};
  events::EventBus bus;
  std::vector<events::PlacementEvent> placements;
  std::string failures;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* p = std::get_if<events::PlacementEvent>(&e)) placements.push_back(*p);
    if (auto* f = std::get_if<events::FailedEvent>(&e)) failures += f->message + "\n";
  });
  TrainerOptions b;
  b.runDir = tmp / "split";
  ASSERT_EQ(Trainer(split, bus, b).run(), RunOutcome::Finished) << failures;
  // Before step 1, and again after it with the optimizer state step 1 made.
  ASSERT_EQ(placements.size(), 2u);
  for (const auto& p : placements) EXPECT_TRUE(p.audit.empty());
  EXPECT_GT(placements[0].checkedTensors, 0);
  EXPECT_GT(placements[1].checkedTensors, placements[0].checkedTensors);
  std::set<std::string> devices;
  for (const auto& blk : placements[0].blocks) devices.insert(blk.device);
  EXPECT_EQ(devices, (std::set<std::string>{"cuda:0", "cuda:1"}));

  const auto ma = RunFolder(a.runDir).readMetrics(), mb = RunFolder(b.runDir).readMetrics();
  ASSERT_EQ(ma.size(), 8u);
  ASSERT_EQ(mb.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const double la = ma[i]["loss"].get<double>(), lb = mb[i]["loss"].get<double>();
    EXPECT_NEAR(la, lb, 1e-4 * std::max(1.0, std::abs(la))) << "step " << i + 1;
  }
  EXPECT_EQ(allocated(0), 0);
  EXPECT_EQ(allocated(1), 0);
}
