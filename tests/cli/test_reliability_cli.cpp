// Issue 13 through the real strata-train: concurrent runs in one folder, the
// stop signals, run names, a full disk with --stop-after, and the exit codes of
// docs/training.md for numbers, binary configs, plan without CUDA and the rest.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "train/RunFolder.h"

namespace {

namespace fs = std::filesystem;
using strata::test::cli::Child;
using strata::test::cli::lineCount;
using strata::test::cli::runStrataTrain;
using strata::test::cli::strataTrainPath;
using strata::test::cli::tinyRunYaml;

void writeFile(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Waits until `path` has at least `lines` lines (or the child ended).
bool waitForLines(Child& c, const fs::path& path, size_t lines) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) {
    if (lineCount(path) >= lines) return true;
    if (c.poll()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class CliReliability : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
  }
  strata::test::TempDir tmp;
  fs::path log(const std::string& name) { return tmp / (name + ".log"); }
};

// Item 1: a second run or a resume of a live folder is refused naming the pid.
TEST_F(CliReliability, SecondRunAndResumeOfALiveFolderAreRefusedNamingThePid) {
  writeFile(tmp / "long.yaml", tinyRunYaml(tmp.path().string(), 100000, 1));
  const fs::path run = tmp / "run";
  Child live({"run", (tmp / "long.yaml").string(), "--run-dir", run.string()}, log("live"));
  ASSERT_TRUE(waitForLines(live, run / "metrics.jsonl", 3)) << live.output();

  // Bounded: a second run that is wrongly let in would train for a long time.
  const auto refused = [&](const std::vector<std::string>& args, const std::string& name) {
    Child c(args, log(name));
    if (!c.waitFor(std::chrono::seconds(60))) {
      c.signal(SIGKILL);
      c.wait();
      ADD_FAILURE() << name << " was let into the live run's folder:\n" << c.output();
      return;
    }
    EXPECT_EQ(c.exitCode(), 2) << c.output();
    EXPECT_NE(c.output().find("in use by process " + std::to_string(live.pid())), std::string::npos) << c.output();
  };
  refused({"run", (tmp / "long.yaml").string(), "--run-dir", run.string()}, "second");
  const size_t before = lineCount(run / "metrics.jsonl");
  refused({"resume", run.string()}, "resume");
  EXPECT_GE(lineCount(run / "metrics.jsonl"), before);  // the live run's log was not truncated

  live.signal(SIGINT);
  EXPECT_EQ(live.wait(), 130) << live.output();
  // Every step once, in order.
  const auto lines = strata::train::RunFolder(run).readMetrics();
  for (size_t i = 0; i < lines.size(); ++i) ASSERT_EQ(lines[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
}

// Item 3: SIGTERM and SIGHUP are Ctrl-C: a checkpoint of the current step, exit 130.
TEST_F(CliReliability, SigtermAndSighupWriteACheckpointAndExit130) {
  writeFile(tmp / "long.yaml", tinyRunYaml(tmp.path().string(), 100000, 0));
  for (int sig : {SIGTERM, SIGHUP}) {
    const fs::path run = tmp / ("run" + std::to_string(sig));
    Child c({"run", (tmp / "long.yaml").string(), "--run-dir", run.string()}, log("sig"));
    ASSERT_TRUE(waitForLines(c, run / "metrics.jsonl", 3)) << c.output();
    c.signal(sig);
    EXPECT_EQ(c.wait(), 130) << strsignal(sig) << "\n" << c.output();
    const std::string out = c.output();
    EXPECT_NE(out.find(sig == SIGTERM ? "SIGTERM" : "SIGHUP"), std::string::npos) << out;
    EXPECT_NE(out.find("stopped at step"), std::string::npos) << out;
    strata::train::RunFolder f(run);
    ASSERT_TRUE(f.latestCheckpoint()) << out;
    EXPECT_EQ(f.latestCheckpoint()->step, static_cast<int64_t>(f.readMetrics().size()));
    EXPECT_NO_THROW(strata::train::readCheckpoint(f.latestCheckpoint()->path));
  }
}

// Item 4: the run name is checked by validate and by run, before anything is written.
TEST_F(CliReliability, BadRunNamesAreRefusedByValidateAndRun) {
  fs::create_directories(tmp / "out");
  writeFile(tmp / "ok.yaml", tinyRunYaml((tmp / "out").string(), 2, 1));
  for (const std::string name : {"a/b", "../../escape", ""}) {
    std::string out;
    const std::string set = "job.name=" + name;
    EXPECT_EQ(runStrataTrain({"validate", (tmp / "ok.yaml").string(), "--set", set}, log("v"), &out), 2) << out;
    EXPECT_NE(out.find("job.name"), std::string::npos) << out;
    EXPECT_EQ(runStrataTrain({"run", (tmp / "ok.yaml").string(), "--set", set}, log("r"), &out), 2) << out;
    EXPECT_NE(out.find("job.name"), std::string::npos) << out;
  }
  // Bytes that are not UTF-8, in the file itself.
  writeFile(tmp / "bytes.yaml", tinyRunYaml((tmp / "out").string(), 2, 1, "\"caf\xff\xfe\""));
  std::string out;
  EXPECT_EQ(runStrataTrain({"validate", (tmp / "bytes.yaml").string()}, log("b"), &out), 2) << out;
  EXPECT_NE(out.find("job.name"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp.path().parent_path() / "escape"));
  EXPECT_TRUE(fs::is_empty(tmp / "out"));
}

// Item 5: a checkpoint that cannot be written is not "stopped, checkpoint kept".
TEST_F(CliReliability, StopAfterWithAFailedSaveExits1NamingTheCause) {
  writeFile(tmp / "c.yaml", tinyRunYaml(tmp.path().string(), 10, 0));
  std::string out;
  // 16 KB: the config and the metrics fit, the checkpoint's LoRA file does not.
  const int code =
      runStrataTrain({"run", (tmp / "c.yaml").string(), "--run-dir", (tmp / "run").string(), "--stop-after", "3"},
                     log("full"), &out, 16 * 1024);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find(std::strerror(EFBIG)), std::string::npos) << out;
  EXPECT_NE(out.find("could not be written"), std::string::npos) << out;
  // The same without the limit: exit 130 and the checkpoint is there.
  EXPECT_EQ(runStrataTrain({"run", (tmp / "c.yaml").string(), "--run-dir", (tmp / "ok").string(), "--stop-after", "3"},
                           log("ok"), &out),
            130)
      << out;
  EXPECT_EQ(strata::train::RunFolder(tmp / "ok").latestCheckpoint()->step, 3);
}

// Item 8 and 9: numbers from the user are range-checked; bad input is exit 2.
TEST_F(CliReliability, NumbersOutOfRangeAreExit2WithOneLine) {
  const std::string demo = (strata::test::sourceDir() / "configs" / "demo.yaml").string();
  const std::string flux = (strata::test::sourceDir() / "configs" / "flux-dev-split-4x16gb.yaml").string();
  std::string out;
  for (const std::string devices : {"18446744073709551617x1GB", "4x99999999999999999999GB", "1e999GB", "0x16GB"}) {
    EXPECT_EQ(runStrataTrain({"plan", flux, "--devices", devices}, log("plan"), &out), 2) << devices << "\n" << out;
    EXPECT_EQ(out.find("stoll"), std::string::npos) << out;
    EXPECT_EQ(out.find("-9223"), std::string::npos) << out;
    EXPECT_EQ(runStrataTrain({"validate", flux, "--devices", devices}, log("val"), &out), 2) << out;
  }
  for (const std::string bad : {"0", "-5", "abc", "99999999999999999999"}) {
    EXPECT_EQ(runStrataTrain({"run", demo, "--stop-after", bad}, log("sa"), &out), 2) << bad << "\n" << out;
    EXPECT_NE(out.find("--stop-after"), std::string::npos) << out;
    EXPECT_EQ(runStrataTrain({"resume", tmp.path().string(), "--stop-after", bad}, log("sr"), &out), 2) << out;
  }
  for (const std::string gb : {"-1", "1e300", "nan"})
    EXPECT_EQ(runStrataTrain({"plan", flux, "--devices", "2x16GB", "--other-gb", gb}, log("o"), &out), 2) << out;
}

TEST_F(CliReliability, PlanOfACpuConfigWorksWithoutCuda) {
  std::string out;
  const std::string demo = (strata::test::sourceDir() / "configs" / "demo.yaml").string();
  EXPECT_EQ(runStrataTrain({"plan", demo}, log("plan"), &out), 0) << out;
  EXPECT_NE(out.find("The run uses the cpu: model.device is cpu"), std::string::npos) << out;
}

TEST_F(CliReliability, BinaryConfigIsQuotedShortAndHugeOrLoopingFilesSayWhy) {
  std::string blob;
  for (int i = 0; i < 900000; ++i) blob += static_cast<char>(0x41 + (i * 13) % 60);
  writeFile(tmp / "blob.yaml", blob);
  std::string out;
  EXPECT_EQ(runStrataTrain({"validate", (tmp / "blob.yaml").string()}, log("blob"), &out), 2);
  EXPECT_LT(out.size(), 2000u) << out.substr(0, 2000);
  // 5 MB: refused before it is read, in one line.
  writeFile(tmp / "big.yaml", std::string(5 << 20, 'a'));
  EXPECT_EQ(runStrataTrain({"validate", (tmp / "big.yaml").string()}, log("big"), &out), 2);
  EXPECT_LT(out.size(), 400u) << out.substr(0, 400);
  EXPECT_NE(out.find("too large"), std::string::npos) << out;
  fs::create_symlink(tmp / "y.yaml", tmp / "x.yaml");
  fs::create_symlink(tmp / "x.yaml", tmp / "y.yaml");
  EXPECT_EQ(runStrataTrain({"validate", (tmp / "x.yaml").string()}, log("loop"), &out), 2);
  EXPECT_NE(out.find("loop of symbolic links"), std::string::npos) << out;
  EXPECT_EQ(runStrataTrain({"run", (tmp / "x.yaml").string()}, log("loop2"), &out), 2);
  EXPECT_NE(out.find("loop of symbolic links"), std::string::npos) << out;
}

TEST_F(CliReliability, ExportExitCodes) {
  writeFile(tmp / "c.yaml", tinyRunYaml(tmp.path().string(), 2, 1));
  std::string out;
  ASSERT_EQ(runStrataTrain({"run", (tmp / "c.yaml").string(), "--run-dir", (tmp / "run").string()}, log("r"), &out), 0)
      << out;
  EXPECT_EQ(runStrataTrain({"export", (tmp / "run").string(), "--out", (tmp / "e").string()}, log("e"), &out), 0)
      << out;
  EXPECT_EQ(runStrataTrain({"export", (tmp / "nothing").string()}, log("n"), &out), 2) << out;
  // Every checkpoint damaged: nothing intact to export is bad input, each reason listed.
  for (const auto& c : strata::train::RunFolder(tmp / "run").checkpoints())
    fs::resize_file(c.path / "lora.safetensors", 10);
  EXPECT_EQ(runStrataTrain({"export", (tmp / "run").string(), "--out", (tmp / "e2").string()}, log("d"), &out), 2)
      << out;
  EXPECT_NE(out.find("no intact checkpoint"), std::string::npos) << out;
}

// `export --step N` takes any checkpoint, names the file with its step, and never
// replaces a file unasked: refused (exit 2, the ways out named) without --force.
TEST_F(CliReliability, ExportAnyStepNamedWithItAndNoSilentOverwrite) {
  writeFile(tmp / "c.yaml", tinyRunYaml(tmp.path().string(), 2, 1));
  std::string out;
  ASSERT_EQ(runStrataTrain({"run", (tmp / "c.yaml").string(), "--run-dir", (tmp / "run").string()}, log("r"), &out), 0)
      << out;
  const std::string run = (tmp / "run").string(), dir = (tmp / "e").string();
  ASSERT_EQ(runStrataTrain({"export", run, "--step", "1", "--out", dir}, log("e1"), &out), 0) << out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tmp / "e")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << out;
  const std::string name = files[0].filename().string();
  EXPECT_NE(name.find("_step1_"), std::string::npos) << name;
  EXPECT_NE(out.find(name), std::string::npos) << out;  // the file is printed
  const auto written = fs::last_write_time(files[0]);
  EXPECT_EQ(runStrataTrain({"export", run, "--step", "1", "--out", dir}, log("e2"), &out), 2) << out;
  EXPECT_NE(out.find(name), std::string::npos) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(fs::last_write_time(files[0]), written);
  EXPECT_EQ(runStrataTrain({"export", run, "--step", "1", "--out", dir, "--keep-both"}, log("e3"), &out), 0) << out;
  const std::string beside = files[0].stem().string() + "-2" + files[0].extension().string();
  EXPECT_TRUE(fs::exists(tmp / "e" / beside)) << out;
  EXPECT_NE(out.find(beside), std::string::npos) << out;  // said so
  EXPECT_EQ(runStrataTrain({"export", run, "--step", "1", "--out", dir, "--force"}, log("e4"), &out), 0) << out;
  EXPECT_EQ(runStrataTrain({"export", run, "--step", "9", "--out", dir}, log("e5"), &out), 2) << out;
  EXPECT_NE(out.find("no checkpoint of step 9"), std::string::npos) << out;
  // Without --step: the latest, step 2.
  EXPECT_EQ(runStrataTrain({"export", run, "--out", dir}, log("e6"), &out), 0) << out;
  EXPECT_NE(out.find("_step2_"), std::string::npos) << out;
}

}  // namespace
