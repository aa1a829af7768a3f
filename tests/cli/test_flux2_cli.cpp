// strata-train with model.arch: flux2: the shipped FLUX.2-dev config plans over
// four 24 GB cards, an images dataset is refused with the reason, and bench runs
// the tiny preset on the CPU with FLUX.2's FLOP count.
#include <gtest/gtest.h>

#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"

namespace fs = std::filesystem;
using namespace strata::test::cli;

namespace {

class Flux2Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
  }
  strata::test::TempDir tmp;
  fs::path log(const std::string& name) { return tmp / (name + ".log"); }
  std::string config() const { return (strata::test::sourceDir() / "configs" / "flux2-dev-4x24gb.yaml").string(); }
};

}  // namespace

TEST_F(Flux2Cli, Flux2DevPlansOverFour24GbCards) {
  std::string out;
  ASSERT_EQ(runStrataTrain({"plan", config(), "--devices", "4x24GB"}, log("plan"), &out), 0) << out;
  EXPECT_NE(out.find("FLUX.2 preset flux2-dev, 8 double + 48 single blocks"), std::string::npos) << out;
  EXPECT_NE(out.find("placement (memory): fits"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda:3  simulated 24.0 GB"), std::string::npos) << out;
  // A FLUX.1 config turned into FLUX.2 by --set plans too.
  const std::string flux1 = (strata::test::sourceDir() / "configs" / "flux-dev-split-4x16gb.yaml").string();
  ASSERT_EQ(runStrataTrain({"plan", flux1, "--devices", "4x24GB", "--set", "model.arch=flux2", "--set",
                            "model.preset=flux2-dev", "--set", "model.gpu_memory_limit_gb=24"},
                           log("set"), &out),
            0)
      << out;
  EXPECT_NE(out.find("FLUX.2 preset flux2-dev"), std::string::npos) << out;
}

// The template's random weights with an images dataset: the tokenizer is still read, and the key named.
TEST_F(Flux2Cli, AnImagesDatasetWithRandomWeightsNeedsATokenizer) {
  std::string out;
  EXPECT_NE(runStrataTrain({"validate", config(), "--set", "datasets[0].type=images", "--set",
                            "datasets[0].folder_path=" + tmp.path().string()},
                           log("validate"), &out),
            0)
      << out;
  EXPECT_NE(out.find("model.tokenizer_path"), std::string::npos) << out;
  EXPECT_NE(out.find("needs FLUX.2's tokenizer"), std::string::npos) << out;
  EXPECT_EQ(out.find("datasets[0].type"), std::string::npos) << out;
}

TEST_F(Flux2Cli, BenchRunsTheTinyPresetOnTheCpu) {
  std::string out;
  ASSERT_EQ(runStrataTrain({"bench", config(), "--steps", "2", "--set", "model.preset=tiny", "--set",
                            "model.device=cpu", "--set", "model.split_model_over_gpus=false", "--set",
                            "datasets[0].resolution=[64]", "--set", "train.dtype=fp32"},
                           log("bench"), &out),
            0)
      << out;
  EXPECT_NE(out.find("64 px, batch 1, 32 tokens"), std::string::npos) << out;  // 16 image + 16 text tokens
  EXPECT_NE(out.find("TFLOP per step"), std::string::npos) << out;
}
