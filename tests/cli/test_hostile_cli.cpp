// Issue 32's command-line cases: a value given empty, a device list with an
// empty item, a checkpoint whose state.json has a step it cannot have. Each
// must be refused (exit 2) with the reason, and nothing trained or resumed.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"

namespace fs = std::filesystem;
using namespace strata::test::cli;

namespace {

class HostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
    std::ofstream(config) << tinyRunYaml((tmp / "runs").string(), 4, 2);
  }
  strata::test::TempDir tmp;
  fs::path config = tmp / "run.yaml";
  fs::path log(const std::string& name) { return tmp / (name + ".log"); }
};

}  // namespace

// Once read as "not given": the plan ran on this machine and the run in
// <training_folder>/<name>, with exit 0.
TEST_F(HostileCli, AnEmptyValueIsRefusedNotTakenAsTheDefault) {
  std::string out;
  EXPECT_EQ(runStrataTrain({"plan", config.string(), "--devices", ""}, log("plan"), &out), 2) << out;
  EXPECT_NE(out.find("--devices: is empty"), std::string::npos) << out;
  EXPECT_EQ(runStrataTrain({"validate", config.string(), "--devices", " "}, log("validate"), &out), 2) << out;
  EXPECT_EQ(runStrataTrain({"run", config.string(), "--devices", ""}, log("rundev"), &out), 2) << out;
  for (const std::string dir : {"", " "}) {
    EXPECT_EQ(runStrataTrain({"run", config.string(), "--run-dir", dir}, log("rundir"), &out), 2) << out;
    EXPECT_NE(out.find("--run-dir: is empty: give a folder"), std::string::npos) << out;
  }
  EXPECT_FALSE(fs::exists(tmp / "runs")) << "a refused run wrote its folder";
  EXPECT_EQ(runStrataTrain({"export", (tmp / "runs" / "tiny").string(), "--out", ""}, log("export"), &out), 2) << out;
}

TEST_F(HostileCli, ADeviceListWithAnEmptyItemIsRefused) {
  std::string out;
  for (const std::string spec : {"1x16GB,", ",1x16GB", "1x16GB,,16GB"}) {
    EXPECT_EQ(runStrataTrain({"plan", config.string(), "--devices", spec}, log("plan"), &out), 2) << spec << out;
    EXPECT_NE(out.find("empty item between commas"), std::string::npos) << spec << out;
  }
}

// A state.json with a negative step resumed and trained 105 steps; one that
// disagrees with its folder's name is not that checkpoint's either.
TEST_F(HostileCli, ACheckpointWithAnImpossibleStepIsNotResumed) {
  std::string out;
  ASSERT_EQ(runStrataTrain({"run", config.string(), "--stop-after", "2"}, log("run"), &out), 130) << out;
  const fs::path run = tmp / "runs" / "tiny";
  const fs::path state = run / "checkpoints" / "step_00000002" / "state.json";
  ASSERT_TRUE(fs::exists(state)) << out;
  std::ifstream in(state);
  const std::string original((std::istreambuf_iterator<char>(in)), {});
  const size_t at = original.find("\"step\":");
  ASSERT_NE(at, std::string::npos) << original;
  const size_t end = original.find_first_of(",}", at);
  for (const std::string step : {"-103", "7", "\"2\"", "2.5"}) {
    std::ofstream(state) << original.substr(0, at) << "\"step\": " << step << original.substr(end);
    EXPECT_EQ(runStrataTrain({"resume", run.string()}, log("resume"), &out), 2) << step << "\n" << out;
    EXPECT_NE(out.find("state.json: 'step' is"), std::string::npos) << step << "\n" << out;
    EXPECT_EQ(out.find("finished"), std::string::npos) << step << "\n" << out;
  }
}

// `ulimit -f`: SIGXFSZ once ended a run without a word, leaving a .partial-step_*
// folder that resume ignored. Now the write fails like a full disk: a message
// naming the file, exit 1, no partial checkpoint left behind.
TEST_F(HostileCli, AFileSizeLimitIsAWriteErrorWithAMessage) {
  std::string out;
  const int code = runStrataTrain({"run", config.string()}, log("fsize"), &out, 16 * 1024);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("File too large"), std::string::npos) << out;
  const fs::path checkpoints = tmp / "runs" / "tiny" / "checkpoints";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints, ec))
    EXPECT_EQ(e.path().filename().string().rfind(".partial", 0), std::string::npos) << e.path();
}

// `resume` (or `export`) of a folder a run is still training in, before its first
// checkpoint: "in use by process N", not "no checkpoint to resume from".
TEST_F(HostileCli, AFolderStillTrainingBeforeItsFirstCheckpointIsInUse) {
  std::ofstream(config) << tinyRunYaml((tmp / "runs").string(), 1000000, 0);
  Child training({"run", config.string()}, log("training"));
  ASSERT_TRUE(training.started());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (training.output().find("step 1/") == std::string::npos && !training.poll() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(training.output().find("step 1/"), std::string::npos) << training.output();
  const fs::path run = tmp / "runs" / "tiny";
  std::string out;
  for (const std::string verb : {"resume", "export"}) {
    EXPECT_EQ(runStrataTrain({verb, run.string()}, log(verb), &out), 2) << verb << "\n" << out;
    EXPECT_NE(out.find("is in use by process " + std::to_string(training.pid())), std::string::npos) << verb << "\n"
                                                                                                     << out;
  }
  EXPECT_FALSE(training.poll()) << "the run ended: " << training.output();
}

// An export past `ulimit -f` (issue 32, point 7): the write error with its reason,
// exit 1, and no temp file left in the exports folder.
TEST_F(HostileCli, AnExportPastTheFileSizeLimitSaysSoAndLeavesNoTempFile) {
  std::string out;
  ASSERT_EQ(runStrataTrain({"run", config.string(), "--stop-after", "2"}, log("run"), &out), 130) << out;
  const fs::path run = tmp / "runs" / "tiny";
  EXPECT_EQ(runStrataTrain({"export", run.string(), "--format", "kohya"}, log("export"), &out, 2048), 1) << out;
  EXPECT_NE(out.find("File too large"), std::string::npos) << out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run / "exports", ec))
    EXPECT_NE(e.path().filename().string().rfind(".", 0), 0u) << "left behind: " << e.path();
}

// `bench --profile FILE` reported success and wrote nothing (Debian's LibTorch has
// no kineto: its save() refuses, and that went unseen): now the trace is there, or
// the bench fails saying why.
TEST_F(HostileCli, BenchProfileWritesTheTraceOrFailsWithTheReason) {
  for (const std::string warmup : {"1", "2"}) {
    const fs::path trace = tmp / ("trace-" + warmup + ".json");
    std::string out;
    const int code =
        runStrataTrain({"bench", config.string(), "--steps", "1", "--warmup", warmup, "--profile", trace.string()},
                       log("bench"), &out);
    std::error_code ec;
    if (code == 0) {
      EXPECT_TRUE(fs::is_regular_file(trace)) << "warmup " << warmup << ": success without a trace\n" << out;
      EXPECT_GT(fs::file_size(trace, ec), 0u) << out;
    } else {
      EXPECT_EQ(code, 1) << out;
      EXPECT_NE(out.find("--profile " + trace.string() + ": "), std::string::npos) << out;
      EXPECT_EQ(out.find("frame #"), std::string::npos) << out;  // one line, no C++ frames
    }
  }
  // A folder that is not there: never a success.
  std::string out;
  const fs::path nowhere = tmp / "no-such-folder" / "trace.json";
  EXPECT_EQ(
      runStrataTrain({"bench", config.string(), "--steps", "1", "--profile", nowhere.string()}, log("bench2"), &out), 1)
      << out;
  EXPECT_NE(out.find("--profile " + nowhere.string()), std::string::npos) << out;
}
