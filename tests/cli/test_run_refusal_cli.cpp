// `strata-train run` refuses a run whose plan does not fit its card in preflight
// (exit 2, nothing trained), with the words a split's refusal uses. `--devices`
// simulates the card, as `strata-train plan --devices` does: a run on simulated
// devices is a preflight only.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"

namespace fs = std::filesystem;
using namespace strata::test::cli;

namespace {

class RunRefusalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
    std::ofstream(config) << tinyRunYaml((tmp / "runs").string(), 4, 0);
  }
  strata::test::TempDir tmp;
  fs::path config = tmp / "run.yaml";
  fs::path log(const std::string& name) { return tmp / (name + ".log"); }
};

}  // namespace

TEST_F(RunRefusalCli, OneCardTooSmallIsRefusedBeforeAnythingIsTrained) {
  std::string out;
  // FLUX.1-dev's shape in bf16 (23.8 GB of weights) on one 16 GB card.
  EXPECT_EQ(runStrataTrain({"run", config.string(), "--devices", "1x16GB", "--set", "model.device=cuda", "--set",
                            "model.preset=flux-dev", "--set", "train.dtype=bf16"},
                           log("dev"), &out),
            2)
      << out;
  EXPECT_NE(out.find("preflight failed, nothing was trained:\n  the model does not fit: "), std::string::npos) << out;
  EXPECT_NE(out.find("cuda:0 needs"), std::string::npos) << out;
  // The ways out, each planned again: int8 (11.9 GB of weights) fits the 16 GB card; a split needs more cards.
  EXPECT_NE(out.find("way out: quantize the frozen model: model.quantize: true, model.qtype: "), std::string::npos)
      << out;
  EXPECT_NE(out.find("(this fits)"), std::string::npos) << out;
  EXPECT_NE(out.find("way out: split the model over more GPUs"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp / "runs" / "tiny")) << out;

  // The same words as the split's refusal (two 8 GB cards).
  EXPECT_EQ(runStrataTrain(
                {"run", config.string(), "--devices", "2x8GB", "--set", "model.device=cuda", "--set",
                 "model.preset=flux-dev", "--set", "train.dtype=bf16", "--set", "model.split_model_over_gpus=true"},
                log("split"), &out),
            2)
      << out;
  EXPECT_NE(out.find("preflight failed, nothing was trained:\n  the model does not fit: "), std::string::npos) << out;
  EXPECT_NE(out.find("way out: quantize the frozen model"), std::string::npos) << out;
}

TEST_F(RunRefusalCli, AFittingPlanOnSimulatedDevicesIsAPreflightOnly) {
  std::string out;
  EXPECT_EQ(
      runStrataTrain({"run", config.string(), "--devices", "1x16GB", "--set", "model.device=cuda"}, log("tiny"), &out),
      2)
      << out;
  EXPECT_NE(out.find("the plan fits the simulated devices (simulated (--devices 1x16GB)); nothing is loaded or "
                     "trained on devices that are not there"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("step "), std::string::npos) << out;
  EXPECT_EQ(runStrataTrain({"run", config.string(), "--devices", "4xlots"}, log("bad"), &out), 2) << out;
  EXPECT_NE(out.find("4xlots"), std::string::npos) << out;
}

TEST_F(RunRefusalCli, TheCpuStillRuns) {
  std::string out;
  EXPECT_EQ(runStrataTrain({"run", config.string()}, log("cpu"), &out), 0) << out;
  EXPECT_NE(out.find("finished: 4 steps"), std::string::npos) << out;
}
