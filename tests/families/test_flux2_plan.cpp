// model.arch: flux2 through train::prepareRun, as `strata-train plan` uses it: the
// FLUX.2-dev shape (about 32 B parameters) planned over four 24 GB cards, the
// adapters per block, and the FLOPs `strata-train bench` divides by.
#include <gtest/gtest.h>

#include <iostream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "config/FamilyRegistry.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceSelection.h"
#include "families/flux2/Flux2Family.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2LoraRules.h"
#include "train/ModelFamily.h"
#include "train/RunPlanning.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

config::RunConfig flux2Dev() {
  config::RunConfig c;
  c.job.name = "flux2";
  c.model.arch = std::string("flux2");
  c.model.preset = "flux2-dev";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.splitModelOverGpus = true;
  c.model.placement = config::PlacementMode::Memory;
  c.network.linear = 16;
  c.train.dtype = config::DType::BF16;
  c.train.gradientCheckpointing = true;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {512};
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  return c;
}

std::string problemsOf(const train::PreparedRun& run) {
  std::string s;
  for (const auto& p : run.problems) s += p.format() + "\n";
  return s;
}

}  // namespace

TEST(Flux2Plan, Flux2DevSplitsOverFour24GbCards) {
  const auto cfg = flux2Dev();
  train::PrepareOptions po;
  po.preview = true;
  const auto run = train::prepareRun(cfg, device::simulatedInventory("4x24GB"), po);
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  std::cout << run.modelSource << "\n" << placement::formatPlan(run.plan) << std::endl;
  const auto fc = flux2::Flux2Config::flux2Dev();
  EXPECT_EQ(run.tokens, (512 / 16) * (512 / 16) + 512);  // image patches + Mistral's 512 text tokens
  ASSERT_TRUE(run.plan.fits) << run.plan.reason;
  ASSERT_EQ(run.plan.devices.size(), 4u);
  ASSERT_EQ(run.plan.blockDevice.size(), static_cast<size_t>(fc.numLayers + fc.numSingleLayers));
  EXPECT_EQ(run.plan.blockDevice.front(), "cuda:0");
  EXPECT_EQ(run.plan.blockDevice.back(), "cuda:3");
  // The bf16 weights (~64 GB) are spread: no card holds more than half of them.
  const int64_t total = flux2::flux2ParamPlan(fc).totalParams();
  EXPECT_GT(total, 30000000000LL);
  EXPECT_LT(total, 34000000000LL);
  for (const auto& d : run.plan.devices) EXPECT_LT(d.weightBytes, total) << d.device;
  // Default targets: every Linear inside the blocks (double: 12, single: 2); none in the stem.
  EXPECT_EQ(run.input.adapters.at("transformer_blocks.0"), 12);
  EXPECT_EQ(run.input.adapters.at("single_transformer_blocks.0"), 2);
  EXPECT_EQ(run.input.adapters.at("stem"), 0);
}

TEST(Flux2Plan, OneCardDoesNotHoldFlux2Dev) {
  auto cfg = flux2Dev();
  cfg.model.splitModelOverGpus = false;
  train::PrepareOptions po;
  po.preview = true;
  const auto run = train::prepareRun(cfg, device::simulatedInventory("1x24GB"), po);
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  EXPECT_FALSE(run.plan.fits);
}

TEST(Flux2Plan, StepFlopsScaleWithTheBatchAndCountEveryBlockLinear) {
  auto cfg = flux2Dev();
  const auto& family = train::modelFamily(std::string("flux2"));
  const double one = family.trainStepFlops(cfg);
  cfg.train.batchSize = 2;
  EXPECT_NEAR(family.trainStepFlops(cfg) / one, 2.0, 1e-9);
  // At least 4 x image tokens x every block weight (each block Linear sees the image tokens).
  const auto plan = flux2::flux2ParamPlan(flux2::Flux2Config::flux2Dev());
  double blockWeights = 0;
  for (const auto& b : plan.blocks)
    for (const auto& l : b.linears) blockWeights += static_cast<double>(l.inFeatures * l.outFeatures);
  EXPECT_GT(one, 4.0 * 1024 * blockWeights);
  EXPECT_LT(one, 4.0 * (1024 + 512) * blockWeights * 3);
}

TEST(Flux2Plan, PresetsGiveTheirShapesAndOverridesApply) {
  config::ModelConfig m;
  m.arch = std::string("flux2");
  m.randomWeights = true;
  std::string source;
  EXPECT_EQ(families::planFlux2Config(m, &source), flux2::Flux2Config::flux2Dev());
  EXPECT_EQ(source, "preset flux2-dev");
  m.preset = "tiny";
  m.numSingleLayers = 1;
  const auto c = families::planFlux2Config(m, &source);
  EXPECT_EQ(c.numSingleLayers, 1);
  EXPECT_EQ(c.numLayers, flux2::Flux2Config::tiny().numLayers);
  EXPECT_EQ(source, "preset tiny");
  m.axesDimsRope = {8, 8, 8, 6};  // sums to 30, the head is 32 wide
  EXPECT_THROW(families::planFlux2Config(m), ConfigError);
}

// model.preset's FLUX.2 names are the ones the model layer builds, and a [klein]
// preset plans its own shape: FLUX.2 [klein] 9B in bf16 (about 18 GB of weights)
// on one 24 GB card, without a guidance embedding.
TEST(Flux2Plan, KleinPresetsPlanTheirOwnShapes) {
  const auto& described = config::family("flux2").presets;
  EXPECT_EQ(described, flux2::Flux2Config::presetNames());
  auto cfg = flux2Dev();
  cfg.model.preset = "flux2-klein-9b";
  cfg.model.splitModelOverGpus = false;
  train::PrepareOptions po;
  po.preview = true;
  const auto run = train::prepareRun(cfg, device::simulatedInventory("1x24GB"), po);
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  EXPECT_NE(run.modelSource.find("flux2-klein-9b"), std::string::npos) << run.modelSource;
  const auto k9 = flux2::Flux2Config::klein9b();
  EXPECT_EQ(run.plan.blockDevice.size(), static_cast<size_t>(k9.numLayers + k9.numSingleLayers));
  // Its bf16 weights, not FLUX.2-dev's: 2 bytes a parameter of the [klein] 9B layout.
  int64_t weightBytes = 0;
  for (const auto& d : run.plan.devices) weightBytes += d.weightBytes;
  const double expected = 2.0 * static_cast<double>(flux2::flux2ParamPlan(k9).totalParams());
  EXPECT_NEAR(static_cast<double>(weightBytes) / expected, 1.0, 0.01) << placement::formatPlan(run.plan);
}
