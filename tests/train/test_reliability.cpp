// Issue 13 in process: one run per folder (the lock), a stop before step 1,
// the stop signals, run names, a full disk, interrupted pruning, a damaged
// latest checkpoint and a LoRA with NaN. The CLI side is in tests/cli.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/Error.h"
#include "common/Interrupted.h"
#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "train/RunFolder.h"
#include "train/RunFolderLock.h"
#include "train/StopSignals.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

config::RunConfig tinyConfig(const fs::path& folder, int64_t steps) {
  auto c = test::tinyCpuRun("tiny", folder, steps);
  c.train.seed = 11;
  c.train.ema.useEma = true;
  c.train.ema.emaDecay = 0.9;
  c.datasets = {test::shapesDataset(16, 8)};
  c.save.saveEvery = 2;
  return c;
}

RunOutcome runTrainer(const config::RunConfig& cfg, const fs::path& dir, test::EventRecorder* rec = nullptr,
                      int64_t stopAfter = 0) {
  events::EventBus bus;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (rec) (*rec)(e);
  });
  TrainerOptions o;
  o.runDir = dir;
  o.stopAfterStep = stopAfter;
  return Trainer(cfg, bus, o).run();
}

RunOutcome resumeTrainer(const fs::path& dir, test::EventRecorder* rec = nullptr) {
  events::EventBus bus;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (rec) (*rec)(e);
  });
  return Trainer::resumeFrom(dir, bus)->run();
}

std::map<std::string, at::Tensor> finalLora(const fs::path& dir) {
  return io::loadSafetensors(RunFolder(dir).latestCheckpoint()->path / "lora.safetensors");
}

void expectSameLora(const fs::path& a, const fs::path& b) {
  const auto la = finalLora(a), lb = finalLora(b);
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [k, t] : la) EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << k;
}

// Sets RLIMIT_FSIZE for this process (a write past `bytes` fails with EFBIG, as
// a full disk fails with ENOSPC) and ignores SIGXFSZ; restores both when done.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, previous_);
  }

 private:
  rlimit old_{};
  void (*previous_)(int) = nullptr;
};

}  // namespace

// ---- 1. one run per folder ------------------------------------------------------

TEST(RunFolderLock, SecondLockIsRefusedNamingTheHolderAndAStaleLockIsTakenOver) {
  test::TempDir tmp;
  const auto dir = tmp / "run";
  {
    RunFolderLock first(dir);
    EXPECT_EQ(RunFolderLock::holderOf(dir), ::getpid());
    try {
      RunFolderLock second(dir);
      FAIL() << "a second lock on a locked folder was granted";
    } catch (const RunFolderBusy& e) {
      EXPECT_EQ(e.holder(), ::getpid());
      EXPECT_NE(std::string(e.what()).find("in use by process " + std::to_string(::getpid())), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(RunFolderLock::holderOf(dir), 0);
  // A lock file left by a dead process (its pid, no flock) is simply taken over.
  std::ofstream(RunFolderLock::lockPath(dir)) << "999999999\n";
  RunFolderLock again(dir);
  EXPECT_TRUE(again.held());
  std::ifstream in(RunFolderLock::lockPath(dir));
  pid_t written = 0;
  in >> written;
  EXPECT_EQ(written, ::getpid());
}

TEST(Trainer, TwoRunsInOneFolderAreRefusedAndResumeLeavesALiveRunAlone) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 100000);
  cfg.save.saveEvery = 1;
  events::EventBus bus;
  std::atomic<int64_t> steps{0};
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) steps = s->step;
  });
  TrainerOptions o;
  o.runDir = tmp / "run";
  Trainer live(cfg, bus, o);
  live.start();
  while (steps < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  test::EventRecorder second;
  EXPECT_EQ(runTrainer(cfg, tmp / "run", &second), RunOutcome::PreflightFailed);
  EXPECT_NE(second.text().find("in use by process " + std::to_string(::getpid())), std::string::npos) << second.text();

  const size_t before = RunFolder(tmp / "run").readMetrics().size();
  test::EventRecorder resumed;
  EXPECT_EQ(resumeTrainer(tmp / "run", &resumed), RunOutcome::PreflightFailed);
  EXPECT_NE(resumed.text().find("in use by process"), std::string::npos) << resumed.text();
  EXPECT_GE(RunFolder(tmp / "run").readMetrics().size(), before);  // not truncated under the live run

  // Without --run-dir the derived folder is taken: the new run gets the next name.
  test::EventRecorder derived;
  auto cfg2 = tinyConfig(tmp.path(), 2);
  cfg2.job.name = "run";
  events::EventBus bus2;
  auto sub2 = bus2.subscribe([&](const events::Event& e) { derived(e); });
  Trainer other(cfg2, bus2);
  EXPECT_EQ(other.run(), RunOutcome::Finished) << derived.text();
  EXPECT_EQ(other.runDir(), tmp / "run_2");

  live.requestStop();
  EXPECT_EQ(live.wait(), RunOutcome::Stopped);
  // Every step once: the second run never wrote into the first one's log.
  const auto lines = RunFolder(tmp / "run").readMetrics();
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
}

// ---- 2. a stop before step 1 ----------------------------------------------------

TEST(Trainer, StopBeforeTheFirstStepWritesNoCheckpointAndSaysWhere) {
  test::TempDir tmp;
  const auto cfg = tinyConfig(tmp.path(), 6);
  // Asked before anything ran (Ctrl-C while preparing): nothing trained, nothing written.
  {
    events::EventBus bus;
    std::string during;
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (auto* w = std::get_if<events::WarningEvent>(&e)) during += w->message;
    });
    TrainerOptions o;
    o.runDir = tmp / "stopped";
    Trainer t(cfg, bus, o);
    t.requestStop();
    ASSERT_EQ(t.run(), RunOutcome::Stopped);
    EXPECT_NE(during.find("stopped while preparing the data, before step 1"), std::string::npos) << during;
    EXPECT_FALSE(fs::exists(tmp / "stopped")) << "a new run stopped before step 1 leaves no folder";
  }
  // Asked during the step-0 samples: the run folder stays, with no step-0 checkpoint.
  {
    auto sampled = cfg;
    sampled.sample.sampleEvery = 3;
    if (sampled.sample.prompts.empty()) sampled.sample.prompts = {"a red square"};
    events::EventBus bus;
    TrainerOptions o;
    o.runDir = tmp / "sampling";
    Trainer t(sampled, bus, o);
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (std::holds_alternative<events::StartedEvent>(e)) t.requestStop();
    });
    ASSERT_EQ(t.run(), RunOutcome::Stopped);
    EXPECT_FALSE(RunFolder(tmp / "sampling").latestCheckpoint());
    EXPECT_TRUE(RunFolder(tmp / "sampling").readMetrics().empty());
  }
}

// ---- 3. SIGTERM and SIGHUP ------------------------------------------------------

TEST(StopOnSignals, SigtermAndSighupCheckpointAndStopLikeCtrlC) {
  for (int sig : {SIGTERM, SIGHUP, SIGINT}) {
    test::TempDir tmp;
    auto cfg = tinyConfig(tmp.path(), 100000);
    cfg.save.saveEvery = 0;
    events::EventBus bus;
    std::atomic<int64_t> steps{0};
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (auto* s = std::get_if<events::StepEvent>(&e)) steps = s->step;
    });
    TrainerOptions o;
    o.runDir = tmp / "run";
    Trainer t(cfg, bus, o);
    RunOutcome outcome = RunOutcome::Failed;
    {
      StopOnSignals guard(t, "test");
      t.start();
      while (steps < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ::kill(::getpid(), sig);  // without the guard this ends the test binary
      outcome = t.wait();
      EXPECT_EQ(guard.signalReceived(), sig);
    }
    EXPECT_EQ(outcome, RunOutcome::Stopped) << strsignal(sig);
    const auto latest = RunFolder(tmp / "run").latestCheckpoint();
    ASSERT_TRUE(latest) << strsignal(sig);
    EXPECT_EQ(latest->step, t.currentStep());
  }
}

// ---- 4. run names ---------------------------------------------------------------

TEST(Trainer, BadRunNamesAreRefusedBeforeAnythingIsWritten) {
  test::TempDir tmp;
  fs::create_directories(tmp / "a" / "b");
  for (const std::string name : {"../../escape", "x/y", "", "\xff\xfe", "bad\x01name", ".."}) {
    auto cfg = tinyConfig(tmp / "a" / "b", 2);
    cfg.job.name = name;
    events::EventBus bus;
    test::EventRecorder rec;
    auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
    EXPECT_EQ(Trainer(cfg, bus).run(), RunOutcome::PreflightFailed) << name;
    EXPECT_NE(rec.text().find("job.name"), std::string::npos) << rec.text();
  }
  EXPECT_FALSE(fs::exists(tmp / "escape"));
  EXPECT_TRUE(fs::is_empty(tmp / "a" / "b"));
}

// ---- 5. disk full and interrupted pruning ---------------------------------------

TEST(RunFolder, AppendOnAFullDiskNamesTheOsErrorAndLeavesNoTornLine) {
  test::TempDir tmp;
  RunFolder f(tmp / "run");
  f.create();
  f.appendMetrics({{"step", 1}, {"loss", 0.5}});
  const auto size = fs::file_size(f.metricsPath());
  try {
    FileSizeLimit limit(size + 10);  // room for 10 bytes of the next line only
    f.appendMetrics({{"step", 2}, {"loss", 0.25}, {"note", std::string(200, 'x')}});
    FAIL() << "the append past the limit succeeded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(EFBIG)), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::file_size(f.metricsPath()), size);  // cut back: no torn line
  f.appendMetrics({{"step", 2}, {"loss", 0.25}});
  ASSERT_EQ(f.readMetrics().size(), 2u);
}

TEST(Trainer, StopWhoseCheckpointCannotBeWrittenIsAFailureNamingTheCause) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 10);
  cfg.save.saveEvery = 0;
  test::EventRecorder rec;
  RunOutcome outcome;
  {
    // config.yaml and the metrics fit; the checkpoint's LoRA file does not.
    FileSizeLimit limit(16 * 1024);
    outcome = runTrainer(cfg, tmp / "run", &rec, /*stopAfter=*/3);
  }
  EXPECT_EQ(outcome, RunOutcome::Failed) << rec.text();  // not Stopped (exit 130 = checkpoint written)
  EXPECT_EQ(exitCodeOf(outcome), kExitFailed);
  EXPECT_NE(rec.text().find(std::strerror(EFBIG)), std::string::npos) << rec.text();
  EXPECT_NE(rec.text().find("stopped at step 3 but its checkpoint could not be written"), std::string::npos)
      << rec.text();
  EXPECT_FALSE(RunFolder(tmp / "run").latestCheckpoint());
}

TEST(RunFolder, PruneLeavesNoHalfDeletedCheckpointAndOpenCleansLeftovers) {
  test::TempDir tmp;
  const auto cfg = tinyConfig(tmp.path(), 8);
  ASSERT_EQ(runTrainer(cfg, tmp / "straight"), RunOutcome::Finished);
  ASSERT_EQ(runTrainer(cfg, tmp / "run", nullptr, 4), RunOutcome::Stopped);
  RunFolder f(tmp / "run");
  // What kills leave: a prune cut midway, an unfinished checkpoint, a re-save cut
  // between its renames, a temp file and a torn metrics line.
  const auto ck = f.checkpointsDir();
  fs::create_directories(ck / ".trash-step_00000001");
  std::ofstream(ck / ".trash-step_00000001" / "rng.safetensors") << "half";
  fs::create_directories(ck / ".partial-step_00000006");
  std::ofstream(ck / ".partial-step_00000006" / "lora.safetensors") << "half";
  fs::rename(ck / "step_00000002", ck / ".old-step_00000002");
  std::ofstream(f.root() / ".config.yaml.tmp.AbC123") << "half";
  std::ofstream(f.metricsPath(), std::ios::app) << "{\"step\": 5, \"lo";

  test::EventRecorder rec;
  ASSERT_EQ(resumeTrainer(tmp / "run", &rec), RunOutcome::Finished) << rec.text();
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left over: " << e.path();
  EXPECT_FALSE(fs::exists(f.root() / ".config.yaml.tmp.AbC123"));
  const auto lines = f.readMetrics();
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
  expectSameLora(tmp / "straight", tmp / "run");

  // Pruning renames first: after it, no step_N folder is half there.
  const auto removed = pruneCheckpoints(f, 1);
  EXPECT_FALSE(removed.empty());
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().filename().string().rfind(".trash-", 0), std::string::npos);
  for (const auto& c : f.checkpoints()) EXPECT_NO_THROW(readCheckpoint(c.path));
}

// ---- 6. a damaged latest checkpoint ---------------------------------------------

TEST(Trainer, DamagedLatestCheckpointFallsBackToThePreviousIntactOneAndSaysSo) {
  test::TempDir tmp;
  const auto cfg = tinyConfig(tmp.path(), 8);
  ASSERT_EQ(runTrainer(cfg, tmp / "straight"), RunOutcome::Finished);
  ASSERT_EQ(runTrainer(cfg, tmp / "run", nullptr, 6), RunOutcome::Stopped);
  RunFolder f(tmp / "run");
  ASSERT_EQ(f.latestCheckpoint()->step, 6);
  const auto damaged = f.latestCheckpoint()->path;
  fs::resize_file(damaged / "lora.safetensors", fs::file_size(damaged / "lora.safetensors") / 2);

  // export takes the newest intact one and says so.
  std::vector<std::string> notes;
  const auto files = exportRun(tmp / "run", {config::ExportFormat::Diffusers}, {std::nullopt, tmp / "out"}, &notes);
  ASSERT_EQ(files.size(), 1u);
  std::string all;
  for (const auto& n : notes) all += n + "\n";
  EXPECT_NE(all.find("step_00000006"), std::string::npos) << all;
  EXPECT_NE(all.find("step_00000004"), std::string::npos) << all;

  // resume continues from step 4, sets the damaged one aside, and ends as the straight run.
  test::EventRecorder rec;
  ASSERT_EQ(resumeTrainer(tmp / "run", &rec), RunOutcome::Finished) << rec.text();
  EXPECT_NE(rec.text().find("resuming from " + (f.checkpointsDir() / "step_00000004").string()), std::string::npos)
      << rec.text();
  EXPECT_TRUE(fs::exists(f.checkpointsDir() / "damaged-step_00000006"));
  expectSameLora(tmp / "straight", tmp / "run");
}

// ---- 6b. Ctrl-C during an export; what a killed export left ----------------------

TEST(Trainer, ExportStopsBeforeTheNextFileAndRemovesAKilledExportsTempFiles) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 2);
  ASSERT_EQ(runTrainer(cfg, tmp / "run"), RunOutcome::Finished);
  const auto out = tmp / "out";
  fs::create_directories(out);
  // What a second Ctrl-C (or kill -9) during a write leaves: io::writeFileAtomic's temp file.
  const auto leftover = out / ".tiny_step2_kohya.safetensors.tmp.Ab12Cd";
  { std::ofstream(leftover) << "half a file"; }
  ExportOptions o;
  o.outDir = out;
  int polls = 0;
  o.stopRequested = [&polls] { return ++polls > 1; };  // Ctrl-C while the first file is written
  std::vector<std::string> notes;
  try {
    exportRun(tmp / "run", {config::ExportFormat::Diffusers, config::ExportFormat::Kohya}, o, &notes);
    FAIL() << "the export went on past the stop request";
  } catch (const Interrupted& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stopped before " + (out / "tiny_step2_kohya.safetensors").string()), std::string::npos)
        << what;
    EXPECT_NE(what.find("tiny_step2_diffusers.safetensors"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(out / "tiny_step2_diffusers.safetensors"));
  EXPECT_FALSE(fs::exists(out / "tiny_step2_kohya.safetensors"));
  EXPECT_FALSE(fs::exists(leftover));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"tiny_step2_diffusers.safetensors"});
  std::string all;
  for (const auto& n : notes) all += n + "\n";
  EXPECT_NE(all.find("removed the unfinished file " + leftover.string()), std::string::npos) << all;
}

// ---- 7. a LoRA with NaN ---------------------------------------------------------

TEST(Trainer, ExportRefusesALoraWithNanNamingTheFirstTensor) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 2);
  cfg.train.ema.useEma = false;
  ASSERT_EQ(runTrainer(cfg, tmp / "run"), RunOutcome::Finished);
  const auto ckpt = RunFolder(tmp / "run").latestCheckpoint()->path;
  auto lora = io::loadSafetensors(ckpt / "lora.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> tensors(lora.begin(), lora.end());
  std::string poisoned;
  for (auto& [k, t] : tensors)
    if (poisoned.empty() && k.find("lora_B") != std::string::npos) {
      t = t.clone();
      t.view({-1})[0] = NAN;
      poisoned = k;
    }
  io::writeSafetensors(ckpt / "lora.safetensors", tensors, {{"format", "strata-checkpoint"}});
  const auto out = tmp / "out";
  try {
    exportRun(tmp / "run", {config::ExportFormat::Diffusers}, {std::nullopt, out});
    FAIL() << "a LoRA with NaN was exported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NaN"), std::string::npos) << what;
    EXPECT_NE(what.find("lora_B"), std::string::npos) << what;  // the tensor is named
  }
  EXPECT_FALSE(fs::exists(out / "tiny_step2_diffusers.safetensors"));
}
