// The planner counts a quantized base's bytes: FLUX.1-dev LoRA at 1024 px with
// checkpointing on one simulated 16 GB card (the plan is printed; it does not fit
// yet), and the seed's 4 x 16 GB split plans with quantization.
#include <gtest/gtest.h>

#include <iostream>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceSelection.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

using namespace strata;

namespace {

train::PreparedRun planOf(const std::string& configName, const std::string& devices,
                          const std::vector<std::string>& sets) {
  auto loaded = config::loadRunConfig(test::sourceDir() / "configs" / configName);
  config::applyOverrides(loaded, sets);
  for (const auto& p : loaded.problems) EXPECT_FALSE(p.isError()) << p.format();
  train::PrepareOptions po;
  po.where = &loaded.where;
  po.preview = true;
  return train::prepareRun(loaded.config, device::simulatedInventory(devices), po);
}

std::string problemsOf(const train::PreparedRun& run) {
  std::string s;
  for (const auto& p : run.problems) s += p.format() + "\n";
  return s;
}

int64_t totalWeightBytes(const placement::PlannerInput& in) {
  int64_t n = in.stem.weightBytes + in.head.weightBytes;
  for (const auto& b : in.blocks) n += b.weightBytes;
  return n;
}

}  // namespace

TEST(QuantPlan, FluxDevInt8At1024WithCheckpointingCountsOneBytePerBlockWeight) {
  const std::vector<std::string> common = {"train.gradient_checkpointing=true"};  // the config is 1024 px
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  const auto bf16 = planOf("flux-dev-1gpu.yaml", "1x16GB", with({}));
  const auto int8 = planOf("flux-dev-1gpu.yaml", "1x16GB", with({"model.quantize=true", "model.qtype=int8"}));
  ASSERT_TRUE(int8.ok()) << problemsOf(int8);
  std::cout << "[quant plan] flux-dev-1gpu.yaml, 1x16GB, 1024 px, checkpointing, int8:\n"
            << placement::formatPlan(int8.plan) << std::endl;
  // Not met yet (issue 14 point 3): the planner puts this at 16.2 GB against the
  // 15.0 GB budget of a 16 GB card; the dequantized copies of a block's Linears
  // kept for its backward (1.2 GB workspace) are the next thing to cut.
  // One byte per block Linear weight: the weights are a bit over half of bf16's.
  if (bf16.ok()) {
    const double ratio = static_cast<double>(totalWeightBytes(int8.input.input)) /
                         static_cast<double>(totalWeightBytes(bf16.input.input));
    std::cout << "[quant plan] int8 / bf16 weight bytes: " << ratio << "; bf16 fits: " << bf16.plan.fits << std::endl;
    EXPECT_GT(ratio, 0.5);
    EXPECT_LT(ratio, 0.52);
    EXPECT_FALSE(bf16.plan.fits);
  }
  const auto fp8 = planOf("flux-dev-1gpu.yaml", "1x16GB", with({"model.quantize=true", "model.qtype=qfloat8"}));
  // A plan is a preview, maybe for another machine: qfloat8 plans on any build,
  // with int8's bytes (1 byte per weight, one scale per row).
  ASSERT_TRUE(fp8.ok()) << problemsOf(fp8);
  EXPECT_EQ(totalWeightBytes(fp8.input.input), totalWeightBytes(int8.input.input));
}

TEST(QuantPlan, SeedSplitOverFour16GbCardsPlansWithQuantization) {
  const auto run = planOf("flux-dev-split-4x16gb.yaml", "4x16GB", {"model.quantize=true", "model.qtype=int8"});
  ASSERT_TRUE(run.ok()) << problemsOf(run);
  std::cout << "[quant plan] flux-dev-split-4x16gb.yaml, 4x16GB, int8:\n"
            << placement::formatPlan(run.plan) << std::endl;
  EXPECT_TRUE(run.plan.fits) << run.plan.reason;
}
