// Runs the built strata-train binary: exit codes and compiler-style output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/TestSupport.h"

namespace {

namespace fs = std::filesystem;

// The binary sits in <build>/app/, this test in <build>/tests/.
fs::path strataTrain() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "app" / "strata-train";
}

struct Result {
  int exitCode = -1;
  std::string output;  // stdout and stderr together
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Result run(const std::string& args) {
  Result r;
  const std::string cmd = quote(strataTrain().string()) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return r;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

fs::path config(const char* name) { return strata::test::sourceDir() / "configs" / name; }

// No crash, no trace: every line is a diagnostic, a hint, a note or the summary.
void expectCleanLines(const Result& r) {
  EXPECT_LT(r.exitCode, 128) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    const bool ok = line.find(": error: ") != std::string::npos || line.find(": warning: ") != std::string::npos ||
                    line.rfind("  hint: ", 0) == 0 || line.rfind("note: ", 0) == 0 ||
                    line.find(": ok (") != std::string::npos || line.find(": invalid (") != std::string::npos ||
                    line.rfind("strata-train: error: ", 0) == 0;
    EXPECT_TRUE(ok) << "unexpected line: " << line << "\nin:\n" << r.output;
  }
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(strataTrain())) GTEST_FAIL() << "strata-train not built at " << strataTrain();
  }
};

TEST_F(Cli, HelpAndVersion) {
  const Result help = run("--help");
  EXPECT_EQ(help.exitCode, 0) << help.output;
  for (const char* cmd : {"validate", "plan", "run", "resume", "export"})
    EXPECT_NE(help.output.find(cmd), std::string::npos) << cmd << "\n" << help.output;
  const Result version = run("--version");
  EXPECT_EQ(version.exitCode, 0);
  EXPECT_EQ(version.output.rfind("strata-train ", 0), 0u) << version.output;
  EXPECT_EQ(run("validate --help").exitCode, 0);
  EXPECT_EQ(run("").exitCode, 2);
  EXPECT_EQ(run("--no-such-option").exitCode, 2);
  EXPECT_EQ(run("validate").exitCode, 2);
}

TEST_F(Cli, ShippedConfigsValidate) {
  for (const char* name : {"demo.yaml", "flux-dev-split-4x16gb.yaml", "flux-dev-1gpu.yaml"}) {
    const Result r = run("validate " + quote(config(name).string()));
    EXPECT_EQ(r.exitCode, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(": ok (0 errors"), std::string::npos) << r.output;
    expectCleanLines(r);
  }
  const Result planned = run("validate " + quote(config("flux-dev-split-4x16gb.yaml").string()) + " --devices 4x16GB");
  EXPECT_EQ(planned.exitCode, 0) << planned.output;
}

// The bug report's case: the split config with low_vram: true added.
TEST_F(Cli, SplitConfigWithLowVramReportsTheConflictWithItsLine) {
  strata::test::TempDir tmp;
  std::string text = readFile(config("flux-dev-split-4x16gb.yaml"));
  const size_t model = text.find("\nmodel:\n");
  ASSERT_NE(model, std::string::npos);
  const size_t insertAt = model + std::string("\nmodel:\n").size();
  text.insert(insertAt, "  low_vram: true\n");
  const int line = static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(insertAt), '\n')) + 1;
  const fs::path file = tmp / "split-low-vram.yaml";
  writeFile(file, text);

  const Result r = run("validate " + quote(file.string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  const std::string expected = file.string() + ":" + std::to_string(line) + ":3: error: model.low_vram: ";
  EXPECT_NE(r.output.find(expected), std::string::npos) << "missing '" << expected << "' in:\n" << r.output;
  EXPECT_NE(r.output.find("split_model_over_gpus"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  hint: "), std::string::npos) << r.output;
  expectCleanLines(r);
}

TEST_F(Cli, OverridesAreCheckedToo) {
  const Result r = run("validate " + quote(config("flux-dev-split-4x16gb.yaml").string()) +
                       " --set model.low_vram=true --set train.lr=2e-4");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("--set model.low_vram=true: error: model.low_vram: "), std::string::npos) << r.output;
  const Result bad = run("validate " + quote(config("demo.yaml").string()) + " --set train.stesp=3");
  EXPECT_EQ(bad.exitCode, 2) << bad.output;
  EXPECT_NE(bad.output.find("did you mean 'train.steps'"), std::string::npos) << bad.output;
}

TEST_F(Cli, GpuChecksAgainstPlannedDevices) {
  const Result r = run("validate " + quote(config("flux-dev-split-4x16gb.yaml").string()) + " --devices 2x16GB");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("gpu id 3 does not exist"), std::string::npos) << r.output;
  const Result badSpec = run("validate " + quote(config("demo.yaml").string()) + " --devices 4xlots");
  EXPECT_EQ(badSpec.exitCode, 2) << badSpec.output;
  expectCleanLines(badSpec);
}

TEST_F(Cli, BadInputIsOneClearLineAndExitTwo) {
  strata::test::TempDir tmp;
  // Missing file.
  Result r = run("validate " + quote((tmp / "nope.yaml").string()));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.output.find("no such file"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  // A folder.
  r = run("validate " + quote(tmp.path().string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  // YAML syntax error: one diagnostic with its line.
  writeFile(tmp / "syntax.yaml", "model:\n  random_weights: true\ntrain:\n  lr: [0.1\n  steps: 3\n");
  r = run("validate " + quote((tmp / "syntax.yaml").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find((tmp / "syntax.yaml").string() + ":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("YAML syntax error"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;  // + summary
  expectCleanLines(r);
  // A binary file.
  writeFile(tmp / "bin.yaml", std::string("\x93NUMPY\0\0\x01", 9));
  r = run("validate " + quote((tmp / "bin.yaml").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  // Truncated at many points: never a crash, clean lines, exit 0 or 2.
  const std::string full = readFile(config("flux-dev-split-4x16gb.yaml"));
  for (size_t n : {size_t{0}, full.size() / 5, full.size() / 3, full.size() / 2, full.size() * 4 / 5}) {
    writeFile(tmp / "cut.yaml", full.substr(0, n));
    r = run("validate " + quote((tmp / "cut.yaml").string()));
    EXPECT_EQ(r.exitCode, 2) << "cut at " << n << "\n" << r.output;
    expectCleanLines(r);
  }
}

TEST_F(Cli, AiToolkitJobFilesAreImported) {
  strata::test::TempDir tmp;
  writeFile(tmp / "job.yaml",
            "job: extension\n"
            "config:\n"
            "  name: t\n"
            "  process:\n"
            "    - type: sd_trainer\n"
            "      trigger_word: xyz\n"
            "      model: {random_weights: true, low_vram: true, split_model_over_gpus: true, gpu_ids: \"0,1\"}\n"
            "      datasets: [{type: synthetic}]\n"
            "      sample: {sample_every: 0}\n");
  const Result r = run("validate " + quote((tmp / "job.yaml").string()));
  // low_vram is left out of the import with the reason (Strata has nothing to switch), so the
  // split it came with is no conflict.
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find(":6:7: warning: config.process[0].trigger_word: ai-toolkit key not used"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(":7:37: warning: config.process[0].model.low_vram: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("one block at a time"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("imported from an ai-toolkit job"), std::string::npos) << r.output;
  expectCleanLines(r);
}

// What the app lists before Start, the command says too: a jsonl file without a usable
// line (with the fields its lines have) and a model folder without a tokenizer.
TEST_F(Cli, ADatasetThatYieldsNothingIsAnError) {
  strata::test::TempDir tmp;
  fs::create_directories(tmp / "model");
  writeFile(tmp / "model" / "config.json", "{}");
  writeFile(tmp / "data.jsonl", "{\"question\": \"a\", \"answer\": \"b\"}\n");
  writeFile(tmp / "run.yaml",
            "model: {arch: llama, random_weights: true, device: cpu, name_or_path: " + (tmp / "model").string() +
                "}\n"
                "datasets:\n"
                "  - type: jsonl\n"
                "    file_path: " +  // 4
                (tmp / "data.jsonl").string() +
                "\nsample: {sample_every: 0}\n");
  const Result r = run("validate " + quote((tmp / "run.yaml").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find(":4:5: error: datasets[0].file_path: no usable sample"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the line has: question, answer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: model.name_or_path: no tokenizer"), std::string::npos) << r.output;
  expectCleanLines(r);
}

}  // namespace

// `bench` on the CPU demo config: the JSON has every figure, and the step times
// are the measured steps only.
TEST_F(Cli, BenchDemoConfigJson) {
  const Result r = run("bench " + quote(config("demo.yaml").string()) + " --steps 2 --json");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto start = r.output.find('{');
  ASSERT_NE(start, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(start));
  for (const char* key : {"median_step_ms", "min_step_ms", "step_ms", "flops_per_step", "tflops", "devices",
                          "share_of_peak", "tokens", "resolution"})
    EXPECT_TRUE(j.contains(key)) << key << "\n" << r.output;
  EXPECT_EQ(j["steps"].get<int>(), 2);
  EXPECT_EQ(j["step_ms"].size(), 2u);
  EXPECT_GT(j["median_step_ms"].get<double>(), 0.0);
  EXPECT_LE(j["min_step_ms"].get<double>(), j["median_step_ms"].get<double>());
  EXPECT_GT(j["flops_per_step"].get<double>(), 0.0);
  ASSERT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["device"].get<std::string>(), "cpu");
  EXPECT_TRUE(j["share_of_peak"].is_null());      // no peak figure for a CPU
  EXPECT_TRUE(j["attention_backend"].is_null());  // a CUDA setting
  // The paths the steps ran, as the run's summary says them.
  const std::string paths = j["paths"].get<std::string>();
  EXPECT_NE(paths.find("on the CPU"), std::string::npos) << paths;
  EXPECT_NE(paths.find("eager steps"), std::string::npos) << paths;
  EXPECT_NE(paths.find("checkpointing"), std::string::npos) << paths;
  EXPECT_EQ(run("bench " + quote(config("demo.yaml").string()) + " --steps 0").exitCode, 2);
}

// The step's values are read a step late, so the first and last measured steps' times
// are the run's edges: median and min leave them out where 3 or more were measured.
TEST_F(Cli, BenchMedianAndMinLeaveTheFirstAndLastMeasuredStepsOut) {
  const Result r = run("bench " + quote(config("demo.yaml").string()) + " --steps 4 --warmup 1 --json");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const auto ms = j["step_ms"].get<std::vector<double>>();
  ASSERT_EQ(ms.size(), 4u);
  EXPECT_DOUBLE_EQ(j["median_step_ms"].get<double>(), (ms[1] + ms[2]) / 2);
  EXPECT_DOUBLE_EQ(j["min_step_ms"].get<double>(), std::min(ms[1], ms[2]));
}

// `bench --phases`: every phase of a step has its time and memory figures (the
// memory ones are 0 on the CPU, whose allocator keeps no peak; the GPU test
// PhaseTimerGpu checks them on a device).
TEST_F(Cli, BenchPhasesJson) {
  const Result r = run("bench " + quote(config("demo.yaml").string()) + " --steps 2 --phases --json");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto start = r.output.find('{');
  ASSERT_NE(start, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(start));
  ASSERT_TRUE(j.contains("phases")) << r.output;
  std::vector<std::string> names;
  for (const auto& p : j["phases"]) {
    names.push_back(p["phase"].get<std::string>());
    for (const char* key : {"median_ms", "ms", "allocated_bytes_after", "peak_allocated_bytes"})
      EXPECT_TRUE(p.contains(key)) << key << " in " << p.dump();
    EXPECT_EQ(p["ms"].size(), 4u) << p.dump();  // 2 warm-up + 2 measured steps
    EXPECT_EQ(p["peak_allocated_bytes"].get<int64_t>(), 0) << p.dump();
  }
  for (const char* phase : {"data", "forward", "backward", "optimizer"})
    EXPECT_NE(std::find(names.begin(), names.end(), phase), names.end()) << phase << "\n" << r.output;
  // --warmup: as many untimed steps first (bench_peer.py runs 3); 0 is refused.
  const Result w = run("bench " + quote(config("demo.yaml").string()) + " --steps 2 --warmup 3 --phases --json");
  ASSERT_EQ(w.exitCode, 0) << w.output;
  const auto jw = nlohmann::json::parse(w.output.substr(w.output.find('{')));
  EXPECT_EQ(jw["warmup_steps"].get<int64_t>(), 3);
  EXPECT_EQ(jw["step_ms"].size(), 2u) << jw.dump();
  for (const auto& p : jw["phases"]) EXPECT_EQ(p["ms"].size(), 5u) << p.dump();
  EXPECT_EQ(run("bench " + quote(config("demo.yaml").string()) + " --warmup 0").exitCode, 2);
}

// A config the preflight refuses never starts: bench names the refusal (it used to
// say only "the run did not finish").
TEST_F(Cli, BenchNamesAPreflightRefusal) {
  const Result r = run("bench " + quote(config("demo.yaml").string()) + " --steps 1 --set model.quantize=true" +
                       " --set model.qtype=int8 --set model.fp8_matmul=true");
  EXPECT_EQ(r.exitCode, 2) << r.output;  // a refusal is bad input, as for run (it was 1)
  EXPECT_NE(r.output.find("error: model.fp8_matmul"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("the run did not finish"), std::string::npos) << r.output;
}

nlohmann::json benchJson(const std::string& args) {
  const Result r = run("bench " + args + " --json");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  const auto start = r.output.find('{');
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(r.output.substr(start));
}

// A step of 2 micro-batches is twice the work of one (trainStepFlops counts one).
TEST_F(Cli, BenchFlopsCountEveryMicroBatch) {
  const std::string demo = quote(config("demo.yaml").string());
  const auto one = benchJson(demo + " --steps 1");
  const auto two = benchJson(demo + " --steps 1 --set train.gradient_accumulation_steps=2");
  ASSERT_TRUE(one.contains("flops_per_step") && two.contains("flops_per_step"));
  EXPECT_NEAR(two["flops_per_step"].get<double>() / one["flops_per_step"].get<double>(), 2.0, 1e-9);
}

// The demo's shapes dataset is benched as it is: the tokens plan counts (80 at
// 32 px, shapes' pixel code), not synthetic data's VAE scale (20).
TEST_F(Cli, BenchTimesThePlansTokens) {
  const std::string demo = quote(config("demo.yaml").string());
  const Result plan = run("plan " + demo + " --json");
  ASSERT_EQ(plan.exitCode, 0) << plan.output;
  const auto pj = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  const auto bj = benchJson(demo + " --steps 1");
  ASSERT_TRUE(bj.contains("tokens"));
  EXPECT_EQ(bj["tokens"].get<int64_t>(), pj["tokens"].get<int64_t>());
}

// Bad input is exit 2 with what is wrong: an unreadable config, a config error
// with its file and line, numbers out of range on the command line.
TEST_F(Cli, BenchBadInputIsExitTwo) {
  strata::test::TempDir tmp;
  writeFile(tmp / "nul.yaml", std::string("model:\0\n", 8));
  Result r = run("bench " + quote((tmp / "nul.yaml").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("NUL"), std::string::npos) << r.output;
  writeFile(tmp / "lr.yaml",
            "model: {preset: tiny, random_weights: true, device: cpu}\n"
            "datasets: [{type: shapes, resolution: [32], num_items: 8}]\n"
            "train: {lr: -1}\n");
  r = run("bench " + quote((tmp / "lr.yaml").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find((tmp / "lr.yaml").string() + ":3:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.lr"), std::string::npos) << r.output;
  const std::string demo = quote(config("demo.yaml").string());
  EXPECT_EQ(run("bench " + demo + " --profile x.json --profile-steps 0").exitCode, 2);
  EXPECT_EQ(run("bench " + demo + " --steps 2 --profile x.json --profile-steps 3").exitCode, 2);
  EXPECT_EQ(run("bench " + demo + " --profile-steps 1").exitCode, 2);  // without --profile: not ignored
  EXPECT_EQ(run("bench " + demo + " --steps 99999999999999999999").exitCode, 2);
}

// The bench's scratch run folder is gone after a bench and after a refusal.
TEST_F(Cli, BenchLeavesNoFolderBehind) {
  strata::test::TempDir tmp;
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  const std::string demo = quote(config("demo.yaml").string());
  const Result ok = run("bench " + demo + " --steps 1");
  const Result refused = run("bench " + demo + " --steps 1 --set model.quantize=true --set model.qtype=int8" +
                             " --set model.fp8_matmul=true");
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  EXPECT_EQ(ok.exitCode, 0) << ok.output;
  EXPECT_EQ(refused.exitCode, 2) << refused.output;
  EXPECT_TRUE(fs::is_empty(tmp.path())) << fs::directory_iterator(tmp.path())->path();
}
