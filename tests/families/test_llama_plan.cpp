// Issue 16, item 7: the second seed's config (configs/llama3-8b-2x16gb.yaml, an 8B
// Llama with random weights) through train::prepareRun, as `strata-train plan` and
// the trainer use it: it fits two simulated 16 GB cards in bf16, not one, and on one
// the quantized alternatives say which quantization fits.
#include <gtest/gtest.h>

#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceSelection.h"
#include "models/llama/LlamaConfig.h"
#include "train/RunPlanning.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

config::RunConfig seedConfig() {
  const fs::path file = test::sourceDir() / "configs" / "llama3-8b-2x16gb.yaml";
  auto loaded = config::loadRunConfig(file);
  for (const auto& p : loaded.problems) EXPECT_FALSE(p.isError()) << p.format();
  // Its name_or_path is relative to the project folder.
  loaded.config.model.nameOrPath = (test::sourceDir() / loaded.config.model.nameOrPath).string();
  return loaded.config;
}

std::string problemsOf(const train::PreparedRun& run) {
  std::string s;
  for (const auto& p : run.problems) s += p.format() + "\n";
  return s;
}

}  // namespace

TEST(LlamaPlan, TheSeedsConfigIsLlama3_8bShaped) {
  const auto cfg = seedConfig();
  EXPECT_EQ(cfg.model.arch, std::string("llama"));
  const auto lc = llama::LlamaConfig::fromFile(cfg.model.nameOrPath);
  const auto ref = llama::LlamaConfig::llama3_8b();
  EXPECT_EQ(lc.hiddenSize, ref.hiddenSize);
  EXPECT_EQ(lc.numHiddenLayers, ref.numHiddenLayers);
  EXPECT_EQ(lc.numAttentionHeads, ref.numAttentionHeads);
  EXPECT_EQ(lc.numKeyValueHeads, ref.numKeyValueHeads);
  EXPECT_EQ(lc.vocabSize, ref.vocabSize);
  EXPECT_EQ(lc.intermediateSize, ref.intermediateSize);
}

TEST(LlamaPlan, FitsTwo16GbCardsInBf16) {
  const auto cfg = seedConfig();
  train::PrepareOptions po;
  po.preview = true;
  const auto run = train::prepareRun(cfg, device::simulatedInventory("2x16GB"), po);
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  EXPECT_EQ(run.tokens, 512);
  EXPECT_NE(run.modelSource.find("32 layers"), std::string::npos) << run.modelSource;
  std::cout << run.modelSource << "\n" << placement::formatPlan(run.plan) << std::endl;
  ASSERT_TRUE(run.plan.fits) << run.plan.reason;
  ASSERT_EQ(run.plan.devices.size(), 2u);
  EXPECT_EQ(run.plan.blockDevice.front(), "cuda:0");
  EXPECT_EQ(run.plan.blockDevice.back(), "cuda:1");
  // Activations of the training step at max_seq_len are counted (memory mode).
  int64_t activations = 0;
  for (const auto& d : run.plan.devices) activations += d.activationBytes;
  EXPECT_GE(activations, 32LL * 2 * 512 * 4096 * 2);
  // The adapters: peft's seven projections per layer.
  EXPECT_EQ(run.input.adapters.at("model.layers.0"), 7);
  EXPECT_EQ(run.input.adapters.at("stem"), 0);
}

TEST(LlamaPlan, OneCardDoesNotFitInBf16AndSaysWhichQuantizationFits) {
  auto cfg = seedConfig();
  cfg.model.splitModelOverGpus = false;
  train::PrepareOptions po;
  po.preview = true;
  const auto inventory = device::simulatedInventory("1x16GB");
  const auto run = train::prepareRun(cfg, inventory, po);
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  EXPECT_FALSE(run.plan.fits);
  ASSERT_EQ(run.plan.devices.size(), 1u);
  EXPECT_GT(run.plan.devices[0].missingBytes, 1000000000LL);  // the bf16 weights alone are 16.06 GB
  std::cout << placement::formatPlan(run.plan) << std::endl;
  const auto alts = train::quantizedAlternatives(cfg, inventory, po);
  ASSERT_EQ(alts.size(), 2u);
  for (const auto& a : alts) {
    EXPECT_TRUE(a.plan.fits) << a.qtype << ": " << a.plan.reason;
    // 1-byte layer weights: about 7 GB for the layers plus 2.1 GB of bf16 embedding and lm_head.
    EXPECT_LT(a.plan.devices[0].weightBytes, 10000000000LL) << a.qtype;
  }
}
