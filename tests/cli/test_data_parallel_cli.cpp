// Issue 35 through the real strata-train: data-parallel runs on Gloo (2 local
// ranks, `run --nproc 2`) take the steps one process takes on the whole global
// batch: the same losses and the same LoRA as `--set train.batch_size=2`, with
// gradient accumulation too; rank 0 alone writes the run folder. And the faults:
// a rank killed, SIGTERM to the job, resume on another world size, a bad variable.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "common/ImagesRunSupport.h"
#include "families/LmTestSupport.h"
#include "models/llama/LlamaConfig.h"
#include "io/Safetensors.h"
#include "train/RunFolder.h"

namespace {

namespace fs = std::filesystem;
using strata::test::cli::Child;
using strata::test::cli::rankPid;
using strata::test::cli::runStrataTrain;
using strata::test::cli::strataTrainPath;

class CliDataParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrainPath())) GTEST_FAIL() << "strata-train not built at " << strataTrainPath();
  }
  strata::test::TempDir tmp;

  // The demo config (configs/demo.yaml), a few steps, no samples; `extra` --set overrides after these.
  std::vector<std::string> demoRun(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run",       (strata::test::sourceDir() / "configs" / "demo.yaml").string(),
                                     "--run-dir", (tmp / name).string(),
                                     "--set",     "train.steps=4",
                                     "--set",     "sample.sample_every=0",
                                     "--set",     "save.save_every=0"};
    for (const auto& e : extra) args.insert(args.end(), {"--set", e});
    return args;
  }
  int run(const std::vector<std::string>& args, const std::string& name, std::string& out) {
    return runStrataTrain(args, tmp / (name + ".log"), &out);
  }
};

std::vector<double> losses(const fs::path& runDir) {
  std::vector<double> out;
  for (const auto& line : strata::train::RunFolder(runDir).readMetrics()) out.push_back(line["loss"].get<double>());
  return out;
}

std::vector<fs::path> exportsOf(const fs::path& runDir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(runDir / "exports", ec))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Each export of `a` has the same tensors as `b`'s of the same name, within `tol`.
void expectSameExports(const fs::path& a, const fs::path& b, double tol) {
  const auto ea = exportsOf(a), eb = exportsOf(b);
  ASSERT_FALSE(ea.empty()) << a;
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    ASSERT_EQ(fs::relative(ea[i], a), fs::relative(eb[i], b));
    if (ea[i].extension() != ".safetensors") continue;
    const auto ta = strata::io::loadSafetensors(ea[i]), tb = strata::io::loadSafetensors(eb[i]);
    ASSERT_EQ(ta.size(), tb.size()) << ea[i];
    for (const auto& [name, t] : ta) {
      ASSERT_TRUE(tb.count(name)) << name;
      const double diff = (t.to(at::kDouble) - tb.at(name).to(at::kDouble)).abs().max().item<double>();
      EXPECT_LE(diff, tol) << ea[i].filename() << " " << name;
    }
  }
}

void expectSameLosses(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "step " << i + 1;
}

TEST_F(CliDataParallel, TwoRanksOfBatchOneTrainAsOneProcessOfBatchTwo) {
  std::string out1, out2;
  ASSERT_EQ(run(demoRun("one", {"train.batch_size=2"}), "one", out1), 0) << out1;
  auto args = demoRun("two", {"train.batch_size=1"});
  args.insert(args.end(), {"--nproc", "2"});
  ASSERT_EQ(run(args, "two", out2), 0) << out2;
  const auto l1 = losses(tmp / "one"), l2 = losses(tmp / "two");
  ASSERT_EQ(l1.size(), 4u);
  expectSameLosses(l1, l2, 1e-4);
  expectSameExports(tmp / "one", tmp / "two", 1e-4);
  // One writer: one metrics line per step (two ranks writing would double them).
  EXPECT_EQ(strata::train::RunFolder(tmp / "two").readMetrics().size(), 4u);
  EXPECT_NE(out2.find("finished"), std::string::npos) << out2;
  // Rank 0 refuses a folder that has checkpoints; rank 1, waiting for its verdict, stops too.
  std::string again;
  EXPECT_EQ(run(args, "again", again), 2) << again;
  EXPECT_NE(again.find("already has checkpoints"), std::string::npos) << again;
  EXPECT_NE(again.find("[rank 1] "), std::string::npos) << again;
}

TEST_F(CliDataParallel, WithGradientAccumulationToo) {
  std::string out1, out2;
  ASSERT_EQ(run(demoRun("one", {"train.batch_size=2", "train.gradient_accumulation_steps=2"}), "one", out1), 0) << out1;
  auto args = demoRun("two", {"train.batch_size=1", "train.gradient_accumulation_steps=2"});
  args.insert(args.end(), {"--nproc", "2"});
  ASSERT_EQ(run(args, "two", out2), 0) << out2;
  expectSameLosses(losses(tmp / "one"), losses(tmp / "two"), 1e-4);
  expectSameExports(tmp / "one", tmp / "two", 1e-4);
}

// network.dtype bf16 (its sums go through Gloo as float32): the same steps within
// bfloat16's rounding.
TEST_F(CliDataParallel, BfloatLoraTwoRanksTrainAsOneProcessOfBatchTwo) {
  std::string out1, out2;
  const std::vector<std::string> bf16{"train.dtype=bf16", "network.dtype=bf16"};
  auto one = bf16, two = bf16;
  one.push_back("train.batch_size=2");
  two.push_back("train.batch_size=1");
  ASSERT_EQ(run(demoRun("one", one), "one", out1), 0) << out1;
  auto args = demoRun("two", two);
  args.insert(args.end(), {"--nproc", "2"});
  ASSERT_EQ(run(args, "two", out2), 0) << out2;
  expectSameLosses(losses(tmp / "one"), losses(tmp / "two"), 2e-3);
  expectSameExports(tmp / "one", tmp / "two", 2e-3);
}

// The numbers are not those of a rank alone: its batch of 1 gives other losses
// (the comparison above can fail).
TEST_F(CliDataParallel, ARankAloneDiffers) {
  std::string out1, out2;
  ASSERT_EQ(run(demoRun("two", {"train.batch_size=2"}), "two", out1), 0) << out1;
  ASSERT_EQ(run(demoRun("one", {"train.batch_size=1"}), "one", out2), 0) << out2;
  const auto a = losses(tmp / "two"), b = losses(tmp / "one");
  ASSERT_EQ(a.size(), b.size());
  double maxDiff = 0;
  for (size_t i = 0; i < a.size(); ++i) maxDiff = std::max(maxDiff, std::abs(a[i] - b[i]));
  EXPECT_GT(maxDiff, 1e-3);
}

// The tiny Llama (tests/fixtures/reference/causal_lm_a) on a jsonl of question ->
// answer pairs: the causal-LM family's batches split over the ranks the same way.
// Its loss is a mean over response tokens, so the answers have one length here
// (docs/data-parallel.md: with lengths that differ the ranks' means are not the
// global token mean).
TEST_F(CliDataParallel, TheTinyLlamaTrainsAsOneProcessOfTheGlobalBatch) {
  const fs::path model = strata::test::referenceDir() / "causal_lm_a" / "model";
  if (!fs::exists(model / "config.json")) GTEST_SKIP() << "no causal_lm_a fixture at " << model;
  strata::test::writeCharTokenizer(tmp / "tok",
                                   static_cast<int>(strata::llama::LlamaConfig::fromFile(model).vocabSize));
  std::string jsonl;
  for (const char* q : {"sky", "grass", "snow", "coal", "sun", "rose", "sea", "night"})
    jsonl += std::string("{\"question\": \"Colour of the ") + q + "?\", \"answer\": \" It is so.\"}\n";
  strata::test::writeText(tmp / "data.jsonl", jsonl);
  strata::config::RunConfig c;
  c.job.name = "lm";
  c.job.trainingFolder = tmp.path().string();
  c.model.arch = std::string("llama");
  c.model.nameOrPath = model.string();
  c.model.tokenizerPath = (tmp / "tok").string();
  c.model.device = strata::config::ComputeDevice::Cpu;
  c.network.linear = 4;
  c.network.linearAlpha = 16;
  c.train.steps = 3;
  c.train.lr = 1e-2;
  c.train.dtype = strata::config::DType::FP32;
  c.train.seed = 3;
  strata::config::DatasetConfig d;
  d.type = strata::config::DatasetType::Jsonl;
  d.filePath = (tmp / "data.jsonl").string();
  d.promptField = "question";
  d.responseField = "answer";
  d.maxSeqLen = 48;
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  c.save.saveEvery = 0;
  c.save.dtype = strata::config::DType::FP32;
  c.save.exportFormats = {strata::config::ExportFormat::Peft};
  strata::test::writeText(tmp / "lm.yaml", strata::config::toYaml(c));
  std::string out1, out2;
  ASSERT_EQ(run({"run", (tmp / "lm.yaml").string(), "--run-dir", (tmp / "one").string(), "--set", "train.batch_size=2"},
                "one", out1),
            0)
      << out1;
  ASSERT_EQ(run({"run", (tmp / "lm.yaml").string(), "--run-dir", (tmp / "two").string(), "--set", "train.batch_size=1",
                 "--nproc", "2"},
                "two", out2),
            0)
      << out2;
  expectSameLosses(losses(tmp / "one"), losses(tmp / "two"), 1e-4);
  expectSameExports(tmp / "one", tmp / "two", 1e-4);
}

}  // namespace

// The tiny FLUX.1 pipeline (tests/fixtures/reference/flux_pipeline_a) on a folder of
// pictures: rank 0 builds the encode cache (VAE latents, T5 + CLIP embeddings)
// while rank 1 waits, then both train on it.
TEST_F(CliDataParallel, TheTinyFluxImagesRunTrainsAsOneProcessOfTheGlobalBatch) {
  const fs::path fixture = strata::test::sourceDir() / "tests" / "fixtures" / "reference" / "flux_pipeline_a";
  if (!fs::exists(fixture / "model")) GTEST_SKIP() << "no flux_pipeline_a fixture at " << fixture;
  const fs::path images = tmp / "images";
  fs::create_directories(images);
  // One size: a batch of 2 in one process needs latents of one size.
  for (int i = 0; i < 4; ++i) {
    strata::io::writePng(images / ("p" + std::to_string(i) + ".png"), strata::test::blockPicture(64, 64, i + 1));
    strata::test::writeBytes(images / ("p" + std::to_string(i) + ".txt"),
                             "a [trigger] block number " + std::to_string(i));
  }
  strata::config::RunConfig c;
  c.job.name = "img";
  c.job.trainingFolder = tmp.path().string();
  c.model.nameOrPath = (fixture / "model").string();
  c.model.device = strata::config::ComputeDevice::Cpu;
  c.network.linear = 4;
  c.network.linearAlpha = 4;
  c.train.steps = 3;
  c.train.lr = 2e-3;
  c.train.dtype = strata::config::DType::FP32;
  c.train.gradientCheckpointing = false;
  c.train.captionDropoutRate = 0.3;
  strata::config::DatasetConfig d;
  d.type = strata::config::DatasetType::Images;
  d.folderPath = images.string();
  d.triggerWord = "ohwx";
  d.resolution = {32};
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  c.save.saveEvery = 0;
  c.save.exportFormats = {strata::config::ExportFormat::Kohya};
  strata::test::writeText(tmp / "img.yaml", strata::config::toYaml(c));
  std::string out1, out2;
  ASSERT_EQ(
      run({"run", (tmp / "img.yaml").string(), "--run-dir", (tmp / "one").string(), "--set", "train.batch_size=2"},
          "one", out1),
      0)
      << out1;
  // Its own cache: the second run must build one, with rank 1 waiting for it.
  ASSERT_TRUE(fs::exists(images / "_strata_cache"));
  fs::remove_all(images / "_strata_cache");
  ASSERT_EQ(run({"run", (tmp / "img.yaml").string(), "--run-dir", (tmp / "two").string(), "--set", "train.batch_size=1",
                 "--nproc", "2"},
                "two", out2),
            0)
      << out2;
  EXPECT_TRUE(fs::exists(images / "_strata_cache"));
  expectSameLosses(losses(tmp / "one"), losses(tmp / "two"), 1e-4);
  expectSameExports(tmp / "one", tmp / "two", 1e-4);
}

namespace {

// Waits until `path` has at least `lines` lines (or the child ended).
bool waitForLines(Child& c, const fs::path& path, size_t lines) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) {
    if (strata::test::cli::lineCount(path) >= lines) return true;
    if (c.poll()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

// Item 7: a rank killed with SIGKILL stops the others within a bounded time, and
// the launcher names it.
TEST_F(CliDataParallel, ARankKilledStopsTheOthersNamingIt) {
  auto args = demoRun("two", {"train.batch_size=1", "train.steps=100000"});
  args.insert(args.end(), {"--nproc", "2"});
  Child job(args, tmp / "killed.log");
  ASSERT_TRUE(waitForLines(job, tmp / "two" / "metrics.jsonl", 2)) << job.output();
  const pid_t rank1 = rankPid(job.pid(), 1);
  ASSERT_GT(rank1, 0) << "rank 1 not found among the launcher's children";
  ::kill(rank1, SIGKILL);
  if (!job.waitFor(std::chrono::seconds(120))) {
    job.signal(SIGKILL);
    job.wait();
    FAIL() << "the job did not end within 120 s of rank 1's death:\n" << job.output();
  }
  EXPECT_EQ(job.exitCode(), 1) << job.output();
  EXPECT_NE(job.output().find("rank 1 was killed by signal 9"), std::string::npos) << job.output();
}

// Item 7: SIGTERM to the job: every rank stops at the same step and rank 0 writes
// one checkpoint of it; exit 130. Resumed on 2 ranks the curve goes on as if
// never stopped; on 1 rank (another world size) the run finishes from there.
TEST_F(CliDataParallel, SigtermSavesOneCheckpointAndResumeTakesAnyWorldSize) {
  auto args = demoRun("two", {"train.batch_size=1", "train.steps=100000"});
  args.insert(args.end(), {"--nproc", "2"});
  Child job(args, tmp / "term.log");
  ASSERT_TRUE(waitForLines(job, tmp / "two" / "metrics.jsonl", 2)) << job.output();
  job.signal(SIGTERM);
  ASSERT_TRUE(job.waitFor(std::chrono::seconds(120))) << job.output();
  EXPECT_EQ(job.exitCode(), 130) << job.output();
  const auto checkpoints = strata::train::RunFolder(tmp / "two").checkpoints();
  ASSERT_EQ(checkpoints.size(), 1u) << job.output();

  // Stop after 2 and resume on 2 ranks: the same losses as 4 steps straight.
  std::string out;
  auto straight = demoRun("straight", {"train.batch_size=1"});
  straight.insert(straight.end(), {"--nproc", "2"});
  ASSERT_EQ(run(straight, "straight", out), 0) << out;
  auto stopped = demoRun("stopped", {"train.batch_size=1"});
  stopped.insert(stopped.end(), {"--nproc", "2", "--stop-after", "2"});
  ASSERT_EQ(run(stopped, "stopped", out), 130) << out;
  ASSERT_EQ(run({"resume", (tmp / "stopped").string(), "--nproc", "2"}, "resumed", out), 0) << out;
  expectSameLosses(losses(tmp / "straight"), losses(tmp / "stopped"), 1e-4);
  expectSameExports(tmp / "straight", tmp / "stopped", 1e-4);

  // Another world size: one process goes on from the checkpoint's place in the data order.
  auto stopped2 = demoRun("stopped2", {"train.batch_size=1"});
  stopped2.insert(stopped2.end(), {"--nproc", "2", "--stop-after", "2"});
  ASSERT_EQ(run(stopped2, "stopped2", out), 130) << out;
  ASSERT_EQ(run({"resume", (tmp / "stopped2").string()}, "resumed1", out), 0) << out;
  EXPECT_EQ(losses(tmp / "stopped2").size(), 4u);

  // One process of batch 2 stopped after 3 steps (6 items) resumed on 2 ranks of batch 2:
  // global batches of 4, so the data order goes on from item 4, and the run says so.
  auto stopped3 = demoRun("stopped3", {"train.batch_size=2"});
  stopped3.insert(stopped3.end(), {"--stop-after", "3"});
  ASSERT_EQ(run(stopped3, "stopped3", out), 130) << out;
  ASSERT_EQ(run({"resume", (tmp / "stopped3").string(), "--nproc", "2"}, "resumed3", out), 0) << out;
  EXPECT_NE(out.find("the checkpoint's 6 drawn items are not whole global batches of 4 (2 ranks); the data order "
                     "goes on from item 4 (the last 2 are drawn again)"),
            std::string::npos)
      << out;
  EXPECT_EQ(losses(tmp / "stopped3").size(), 4u);
}

// Item 7, resume: every rank reads the run folder's latest intact checkpoint by
// itself; ranks that read different ones (here rank 1 resumes a copy of the folder
// without its latest checkpoint) are refused before a step, each saying why.
TEST_F(CliDataParallel, RanksThatResumeFromDifferentCheckpointsAreRefused) {
  std::string out;
  auto first = demoRun("a", {"train.batch_size=1", "save.save_every=1"});
  first.insert(first.end(), {"--stop-after", "2"});
  ASSERT_EQ(run(first, "a", out), 130) << out;
  const auto checkpoints = strata::train::RunFolder(tmp / "a").checkpoints();
  ASSERT_GE(checkpoints.size(), 2u) << out;
  fs::copy(tmp / "a", tmp / "b", fs::copy_options::recursive);
  int64_t latest = 0;
  for (const auto& c : checkpoints) latest = std::max(latest, c.step);
  for (const auto& c : strata::train::RunFolder(tmp / "b").checkpoints())
    if (c.step == latest) fs::remove_all(c.path);
  int64_t older = 0;
  for (const auto& c : strata::train::RunFolder(tmp / "b").checkpoints()) older = std::max(older, c.step);
  ASSERT_LT(older, latest);

  const int port = strata::test::freeLoopbackPort();
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("STRATA_DIST_CONNECT_TIMEOUT_S", "60", 1);
  ::setenv("STRATA_DIST_TIMEOUT_S", "60", 1);
  ::setenv("RANK", "0", 1);
  Child rank0({"resume", (tmp / "a").string()}, tmp / "rank0.log");
  ::setenv("RANK", "1", 1);
  Child rank1({"resume", (tmp / "b").string()}, tmp / "rank1.log");
  for (const char* v :
       {"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "STRATA_DIST_CONNECT_TIMEOUT_S", "STRATA_DIST_TIMEOUT_S", "RANK"})
    ::unsetenv(v);
  for (Child* c : {&rank0, &rank1})
    if (!c->waitFor(std::chrono::seconds(120))) {
      rank0.signal(SIGKILL);
      rank1.signal(SIGKILL);
      rank0.wait();
      rank1.wait();
      FAIL() << "the ranks did not end within 120 s:\n" << rank0.output() << "\n" << rank1.output();
    }
  EXPECT_NE(rank0.exitCode(), 0) << rank0.output();
  EXPECT_NE(rank1.exitCode(), 0) << rank1.output();
  EXPECT_NE(rank1.output().find("this rank would go on from step " + std::to_string(older) + " and rank 0 from step " +
                                std::to_string(latest) + ": the ranks read different checkpoints"),
            std::string::npos)
      << rank1.output();
  EXPECT_NE(rank0.output().find("another rank of this data-parallel run read another checkpoint than rank 0"),
            std::string::npos)
      << rank0.output();
  EXPECT_EQ(losses(tmp / "a").size(), 2u) << "nothing trained past the checkpoint";
}

// Item 7: a launch variable that is wrong is named, and nothing is trained.
TEST_F(CliDataParallel, ABadLaunchVariableIsNamed) {
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "5", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29999", 1);
  std::string out;
  const int code = run(demoRun("bad", {}), "bad", out);
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("RANK=5 is outside 0..1"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp / "bad" / "metrics.jsonl"));
}

// model.replicas under a launch of another size is refused, naming both.
TEST_F(CliDataParallel, ReplicasThatDifferFromTheLaunchAreRefused) {
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "0", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29998", 1);
  std::string out;
  const int code = run(demoRun("conflict", {"model.replicas=3"}), "conflict", out);
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("model.replicas is 3, but this launch starts LOCAL_WORLD_SIZE=2 rank(s)"), std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(tmp / "conflict" / "metrics.jsonl"));
}
