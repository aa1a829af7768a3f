// train::prepareRun, the one preparation of a run that the trainer, `strata-train
// plan` and the app's plan view share: this machine's or simulated devices, which
// devices a config means, one cap for all or one per device, and problems that
// carry the config's key and line.
#include <gtest/gtest.h>

#include <string>

#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

namespace strata::train {
namespace {

constexpr int64_t kGB = 1000000000LL;

// A tiny random model: shapes only, nothing to read.
config::RunConfig tinyConfig() {
  config::RunConfig c;
  c.model.preset = config::ModelPreset::Tiny;
  c.model.randomWeights = true;
  c.train.dtype = config::DType::FP32;
  config::DatasetConfig d;
  d.type = config::DatasetType::Shapes;
  d.resolution = {32};
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  return c;
}

config::RunConfig splitConfig(std::vector<double> capsGb) {
  config::RunConfig c = tinyConfig();
  c.model.device = config::ComputeDevice::Cuda;
  c.model.splitModelOverGpus = true;
  c.model.placement = config::PlacementMode::Memory;
  c.model.gpuMemoryLimitGb = std::move(capsGb);
  return c;
}

PreparedRun preview(const config::RunConfig& c, const std::string& spec, const config::SourceMap* where = nullptr) {
  PrepareOptions o;
  o.preview = true;
  o.where = where;
  return prepareRun(c, device::simulatedInventory(spec), o);
}

std::string errors(const PreparedRun& r) {
  std::string s;
  for (const auto& p : r.problems)
    if (p.isError()) s += p.format() + "\n";
  return s;
}

TEST(PrepareRun, ThisMachineAndASimulatedCpuGiveTheSamePlan) {
  config::RunConfig c = tinyConfig();
  c.model.device = config::ComputeDevice::Cpu;
  const PreparedRun real = prepareRun(c, device::thisMachine());
  ASSERT_TRUE(real.ok()) << errors(real);
  ASSERT_EQ(real.devices.size(), 1u);
  EXPECT_TRUE(real.devices[0].isCpu());
  EXPECT_FALSE(real.devices[0].simulated);
  EXPECT_EQ(real.devicesSource, "this machine");
  EXPECT_EQ(real.modelSource, "preset tiny");

  // "cpu" in a spec is this host's memory too, marked simulated.
  const PreparedRun sim = preview(c, "cpu");
  ASSERT_TRUE(sim.ok()) << errors(sim);
  ASSERT_EQ(sim.devices.size(), 1u);
  EXPECT_TRUE(sim.devices[0].simulated);
  EXPECT_EQ(sim.devicesSource, "simulated (--devices cpu)");
  EXPECT_EQ(placement::formatPlan(sim.plan), placement::formatPlan(real.plan));
  EXPECT_EQ(sim.tokens, real.tokens);
}

TEST(PrepareRun, ASplitOnThisMachineNeedsItsGpus) {
  const auto here = device::thisMachine();
  const PreparedRun r = prepareRun(splitConfig({}), here);
  size_t gpus = 0;
  for (const auto& d : here.devices) gpus += d.isCpu() ? 0 : 1;
  if (gpus >= 2) {
    ASSERT_TRUE(r.ok()) << errors(r);
    EXPECT_EQ(r.devices.size(), gpus);
    for (const auto& d : r.devices) EXPECT_FALSE(d.simulated);
  } else {
    EXPECT_FALSE(r.ok());
    const std::string key = gpus == 0 ? "model.device" : "model.split_model_over_gpus";
    bool found = false;
    for (const auto& p : r.problems) found |= p.isError() && p.key == key;
    EXPECT_TRUE(found) << errors(r);
  }
}

TEST(PrepareRun, SimulatedDevicesAreTheConfigsDevices) {
  // A split over gpu_ids, the spec's cpu after the GPUs as an offload target.
  config::RunConfig c = splitConfig({});
  c.model.gpuIds = {2, 0};
  PreparedRun r = preview(c, "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[0].label(), "cuda:2");
  EXPECT_EQ(r.devices[1].label(), "cuda:0");
  EXPECT_TRUE(r.devices[2].isCpu());
  ASSERT_EQ(r.plan.devices.size(), 3u);
  EXPECT_EQ(r.plan.stemDevice, "cuda:2");
  EXPECT_EQ(r.input.input.devices[0].budgetBytes, 23 * kGB);  // 24 GB less the 1 GB reserve
  EXPECT_EQ(r.freeBytes, (std::vector<int64_t>{0, 0, 0}));    // simulated: no free-memory figure

  // Without the split: the first of gpu_ids, the cpu not used.
  c.model.splitModelOverGpus = false;
  r = preview(c, "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].label(), "cuda:2");

  // model.device: cpu means the cpu whatever GPUs the spec lists (the old CLI
  // planned on the first GPU, the old plan view on the cpu).
  c = tinyConfig();
  c.model.device = config::ComputeDevice::Cpu;
  r = preview(c, "2x8GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_TRUE(r.devices[0].isCpu());
}

TEST(PrepareRun, OneCapForAllOrOnePerDevice) {
  PreparedRun r = preview(splitConfig({16}), "3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{16 * kGB, 16 * kGB, 16 * kGB}));
  for (const auto& b : r.input.input.devices) EXPECT_EQ(b.budgetBytes, 15 * kGB);

  r = preview(splitConfig({10, 12, 14}), "3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{10 * kGB, 12 * kGB, 14 * kGB}));
  EXPECT_EQ(r.input.input.devices[2].budgetBytes, 13 * kGB);

  // One per GPU: a cpu in the spec is never capped and does not count.
  r = preview(splitConfig({10, 12, 14}), "cpu:64GB,3x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.capBytes, (std::vector<int64_t>{10 * kGB, 12 * kGB, 14 * kGB, 0}));
  EXPECT_EQ(r.input.input.devices[3].budgetBytes, 63 * kGB);

  // A cap above a simulated card is that card (a warning, not an error).
  r = preview(splitConfig({32}), "2x24GB");
  ASSERT_TRUE(r.ok()) << errors(r);
  EXPECT_EQ(r.input.input.devices[0].budgetBytes, 23 * kGB);
}

TEST(PrepareRun, AWrongCapCountIsRefusedWithTheKeyAndLine) {
  const std::string yaml =
      "model:\n"                           // 1
      "  preset: tiny\n"                   // 2
      "  random_weights: true\n"           // 3
      "  device: cuda\n"                   // 4
      "  split_model_over_gpus: true\n"    // 5
      "  gpu_memory_limit_gb: [16, 16]\n"  // 6
      "datasets: [{type: shapes, resolution: [32]}]\n"
      "sample: {sample_every: 0}\n";
  const config::LoadedConfig loaded = config::parseRunConfig(yaml, "caps.yaml");
  ASSERT_TRUE(loaded.ok());
  const PreparedRun r = preview(loaded.config, "3x16GB", &loaded.where);
  ASSERT_FALSE(r.ok());
  bool found = false;
  for (const auto& p : r.problems) {
    if (!p.isError()) continue;
    EXPECT_EQ(p.key, "model.gpu_memory_limit_gb") << p.format();
    EXPECT_EQ(p.file, "caps.yaml");
    EXPECT_EQ(p.line, 6);
    EXPECT_NE(p.message.find("2 caps for 3 devices"), std::string::npos) << p.message;
    // The device layer's words, the config layer's key: no key inside the message.
    EXPECT_EQ(p.message.find("gpu_memory_limit_gb"), std::string::npos) << p.message;
    found = true;
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(r.devices.empty());
  // The same config over two devices is fine.
  EXPECT_TRUE(preview(loaded.config, "2x16GB", &loaded.where).ok());
}

TEST(PrepareRun, AGpuIdTheInventoryLacksIsRefusedWithTheKeyAndLine) {
  const std::string yaml =
      "model:\n"
      "  preset: tiny\n"
      "  random_weights: true\n"
      "  gpu_ids: [0, 5]\n"  // 4
      "  split_model_over_gpus: true\n"
      "datasets: [{type: shapes, resolution: [32]}]\n"
      "sample: {sample_every: 0}\n";
  const config::LoadedConfig loaded = config::parseRunConfig(yaml, "ids.yaml");
  const PreparedRun r = preview(loaded.config, "2x16GB", &loaded.where);
  ASSERT_FALSE(r.ok());
  ASSERT_FALSE(r.problems.empty());
  EXPECT_EQ(r.problems[0].key, "model.gpu_ids");
  EXPECT_EQ(r.problems[0].line, 4);
  EXPECT_NE(r.problems[0].message.find("gpu id 5 does not exist"), std::string::npos) << r.problems[0].message;
}

TEST(DeviceSelection, ReadsARequestOnce) {
  const auto inv = device::parseDeviceSpec("cpu:32GB,2x16GB");
  device::DeviceRequest r;
  r.kind = device::ComputeKind::Auto;
  auto s = device::selectDevices(r, inv);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s.devices.size(), 1u);  // no split: the first GPU
  EXPECT_EQ(s.devices[0].label(), "cuda:0");
  r.split = true;
  s = device::selectDevices(r, inv);
  ASSERT_EQ(s.devices.size(), 3u);  // every GPU, then the cpu
  EXPECT_TRUE(s.devices[2].isCpu());
  r.kind = device::ComputeKind::Cuda;
  s = device::selectDevices(r, {});
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].issue, device::SelectionIssue::NoCuda);
  r.kind = device::ComputeKind::Auto;
  s = device::selectDevices(r, device::parseDeviceSpec("16GB"));
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].issue, device::SelectionIssue::TooFewForSplit);
  r.split = false;
  s = device::selectDevices(r, {});  // auto without a GPU: this host
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.devices[0].isCpu());
  EXPECT_FALSE(s.devices[0].simulated);
}

TEST(DeviceSelection, CapsAreOneForAllOrOnePerGpu) {
  const auto devs = device::parseDeviceSpec("2x16GB,cpu");
  EXPECT_EQ(device::resolveCaps(devs, {}).capBytes, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(device::resolveCaps(devs, {8}).capBytes, (std::vector<int64_t>{8 * kGB, 8 * kGB, 0}));
  EXPECT_EQ(device::resolveCaps(devs, {8, 12}).capBytes, (std::vector<int64_t>{8 * kGB, 12 * kGB, 0}));
  EXPECT_NE(device::resolveCaps(devs, {8, 12, 4}).problem.find("3 caps for 2 devices"), std::string::npos);
  auto real = devs;
  for (auto& d : real) d.simulated = false;
  EXPECT_NE(device::resolveCaps(real, {20}).problem.find("exceeds its memory"), std::string::npos);
  EXPECT_TRUE(device::resolveCaps(devs, {20}).ok());  // simulated: the card is the limit
}

}  // namespace
}  // namespace strata::train
