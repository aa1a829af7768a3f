// `strata-train run` of an images run on the flux_pipeline_a fixture names each
// model part as it streams in: "loading T5 N/N" (quantized with model.quantize_te
// or not) and then "loading transformer M/M", both before step 1. N and M are the
// fixture's blocks + 1, read from its config files.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "io/Image.h"
#include "models/flux/FluxConfig.h"
#include "models/t5/T5Checkpoint.h"

using namespace strata;
using namespace strata::test::cli;
namespace fs = std::filesystem;

namespace {

fs::path modelDir() { return test::referenceDir() / "flux_pipeline_a" / "model"; }

TEST(LoadProgressCli, EachModelPartIsNamedAsItLoadsBeforeStepOne) {
  if (!fs::exists(modelDir() / "model_index.json")) GTEST_SKIP() << "no flux_pipeline_a fixture at " << modelDir();
  ASSERT_TRUE(fs::exists(strataTrainPath())) << "strata-train not built at " << strataTrainPath();
  const auto flux = flux::FluxConfig::fromDiffusersJsonFile(modelDir() / "transformer" / "config.json");
  const int64_t transformerUnits = flux.numLayers + flux.numSingleLayers + 1;
  const int64_t t5Units = t5::T5Checkpoint::open(modelDir() / "text_encoder_2").config().numLayers + 1;

  test::TempDir tmp;
  fs::create_directories(tmp / "images");
  for (int i = 0; i < 2; ++i) {
    auto img = at::full({40, 48, 3}, 30 + 90 * i, at::kByte);
    img.slice(0, 0, 20).fill_(200);
    io::writePng(tmp / "images" / ("p" + std::to_string(i) + ".png"), img);
    std::ofstream(tmp / "images" / ("p" + std::to_string(i) + ".txt")) << "picture " << i;
  }
  for (const bool quantizeTe : {false, true}) {
    SCOPED_TRACE(quantizeTe ? "quantize_te" : "float T5");
    const std::string name = quantizeTe ? "q" : "f";
    std::ofstream(tmp / (name + ".yaml"))
        << "job: {name: " << name << ", training_folder: '" << (tmp / "runs").string() << "'}\n"
        << "model: {name_or_path: '" << modelDir().string()
        << "', device: cpu, quantize_te: " << (quantizeTe ? "true" : "false") << ", qtype: int8}\n"
        << "network: {linear: 2, linear_alpha: 2}\n"
        << "train: {steps: 1, dtype: fp32, gradient_checkpointing: false}\n"
        << "datasets: [{type: images, folder_path: '" << (tmp / "images").string()
        << "', resolution: [32], cache_latents_to_disk: false}]\n"
        << "sample: {sample_every: 0, prompts: []}\n"
        << "save: {save_every: 0, export_formats: [diffusers]}\n";
    std::string out;
    ASSERT_EQ(runStrataTrain({"run", (tmp / (name + ".yaml")).string()}, tmp / (name + ".log"), &out), 0) << out;
    // Not a terminal: one line per part, when it is in.
    const std::string t5 = "loading T5 " + std::to_string(t5Units) + "/" + std::to_string(t5Units) + "\n";
    const std::string tr =
        "loading transformer " + std::to_string(transformerUnits) + "/" + std::to_string(transformerUnits) + "\n";
    const auto t5At = out.find(t5), trAt = out.find(tr), step1 = out.find("step 1/");
    ASSERT_NE(t5At, std::string::npos) << out;
    ASSERT_NE(trAt, std::string::npos) << out;
    EXPECT_LT(t5At, trAt) << out;
    if (step1 != std::string::npos) EXPECT_LT(trAt, step1) << out;
  }
}

// Ctrl-C while an images run prepares (issue 32, point 6): it once went on to cache
// every image, load the transformer and write a step-0 checkpoint. Now it stops at
// the next cache batch or loading stage, writes no checkpoint, says where, exits 130.
TEST(LoadProgressCli, CtrlCWhilePreparingStopsThereWithNoCheckpoint) {
  if (!fs::exists(modelDir() / "model_index.json")) GTEST_SKIP() << "no flux_pipeline_a fixture at " << modelDir();
  ASSERT_TRUE(fs::exists(strataTrainPath())) << "strata-train not built at " << strataTrainPath();
  test::TempDir tmp;
  fs::create_directories(tmp / "images");
  for (int i = 0; i < 300; ++i) {
    auto img = at::full({40, 48, 3}, i % 250, at::kByte);
    io::writePng(tmp / "images" / ("p" + std::to_string(i) + ".png"), img);
    std::ofstream(tmp / "images" / ("p" + std::to_string(i) + ".txt")) << "picture " << i;
  }
  std::ofstream(tmp / "run.yaml") << "job: {name: r, training_folder: '" << (tmp / "runs").string() << "'}\n"
                                  << "model: {name_or_path: '" << modelDir().string() << "', device: cpu}\n"
                                  << "network: {linear: 2, linear_alpha: 2}\n"
                                  << "train: {steps: 1000, dtype: fp32, gradient_checkpointing: false}\n"
                                  << "datasets: [{type: images, folder_path: '" << (tmp / "images").string()
                                  << "', resolution: [32], cache_latents_to_disk: true}]\n"
                                  << "sample: {sample_every: 0, prompts: []}\n"
                                  << "save: {save_every: 0, export_formats: [diffusers]}\n";
  Child child({"run", (tmp / "run.yaml").string()}, tmp / "run.log");
  ASSERT_TRUE(child.started());
  // T5 is in: the caching of 300 images comes next.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (child.output().find("loading T5") == std::string::npos && !child.poll() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_NE(child.output().find("loading T5"), std::string::npos) << child.output();
  const auto signalled = std::chrono::steady_clock::now();
  child.signal(SIGINT);
  ASSERT_TRUE(child.waitFor(std::chrono::seconds(60))) << child.output();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(10)) << child.output();
  const std::string out = child.output();
  EXPECT_EQ(child.exitCode(), 130) << out;
  EXPECT_NE(out.find("stopped while "), std::string::npos) << out;
  EXPECT_NE(out.find("before step 1: nothing trained, no checkpoint written"), std::string::npos) << out;
  EXPECT_EQ(out.find("caching latents 300/300"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 1/"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp / "runs" / "r" / "checkpoints")) << out;
}

}  // namespace
