// Runs `strata-train sample` on the flux_pipeline_a fixture's diffusers folder:
// PNG size and text chunks, one file per prompt, per-step progress, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "io/Image.h"

namespace {

namespace fs = std::filesystem;

fs::path strataTrain() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "app" / "strata-train";
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Result {
  int exitCode = -1;
  std::string output;
};

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

// The copy inside the project: this test needs that very folder.
fs::path fixture() { return strata::test::sourceDir() / "tests" / "fixtures" / "reference" / "flux_pipeline_a"; }

std::string common(const fs::path& out) {
  return quote((fixture() / "model").string()) + " --steps 2 --seed 7 --max-sequence-length 16 --out " +
         quote(out.string());
}

TEST(SampleCli, WritesOnePngPerPromptWithPromptAndSeed) {
  strata::test::TempDir tmp;
  const auto out = tmp / "s.png";
  const auto r = run("sample " + common(out) + " --width 32 --height 48 --prompt 'a red hat' --prompt 'a house'");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("step 1/2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 2/2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
  const char* prompts[] = {"a red hat", "a house"};
  for (int i = 0; i < 2; ++i) {
    const auto path = tmp / ("s_" + std::to_string(i) + ".png");
    ASSERT_TRUE(fs::exists(path)) << r.output;
    const auto img = strata::io::readImage(path);
    EXPECT_EQ(img.pixels.sizes().vec(), (std::vector<int64_t>{48, 32, 3}));
    EXPECT_EQ(img.text.at("prompt"), prompts[i]);
    EXPECT_EQ(img.text.at("seed"), "7");
    EXPECT_EQ(img.text.count("lora"), 0u);
  }
}

TEST(SampleCli, AppliesALoraFileAndNamesItInThePng) {
  strata::test::TempDir tmp;
  const auto base = tmp / "base.png";
  const auto lora = tmp / "lora.png";
  ASSERT_EQ(run("sample " + common(base) + " --width 16 --height 16 --prompt 'a red hat'").exitCode, 0);
  const auto r = run("sample " + common(lora) + " --width 16 --height 16 --prompt 'a red hat' --lora " +
                     quote((fixture() / "lora.safetensors").string()));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto a = strata::io::readImage(base), b = strata::io::readImage(lora);
  EXPECT_EQ(b.text.at("lora"), "lora.safetensors");
  EXPECT_EQ(b.pixels.sizes().vec(), (std::vector<int64_t>{16, 16, 3}));
  // The fixture's LoRA moves the image (the parity check says by how much).
  EXPECT_FALSE(a.pixels.equal(b.pixels));
}

TEST(SampleCli, BadInputExitsTwoWithOneClearLine) {
  strata::test::TempDir tmp;
  const auto out = tmp / "x.png";
  auto r = run("sample " + common(out) + " --width 20 --height 16 --prompt p");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("multiple of 16"), std::string::npos) << r.output;
  r = run("sample " + common(out) + " --width 16 --height 16 --prompt p --lora " +
          quote((tmp / "no.safetensors").string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("no.safetensors"), std::string::npos) << r.output;
  // A BFL file alone: the other single files are required, by key.
  r = run("sample " + quote((fixture() / "singles" / "flux1.safetensors").string()) + " --prompt p --out " +
          quote(out.string()));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("model.vae_path"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

// Each is refused in the user's words before anything loads: no "enforce fail"
// with C++ frames, no range in scientific notation, no allocation the size of
// what was typed (--steps 2^31 grew until the OOM killer ended it).
TEST(SampleCli, OutOfRangeValuesAndABadOutputAreRefusedBeforeLoading) {
  strata::test::TempDir tmp;
  const auto out = tmp / "x.png";
  const std::string model = quote((fixture() / "model").string()) + " --prompt p ";
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"--width 0 --out " + quote(out.string()), "'0' is not an image side: give a multiple of 16 from 16 to 4096"},
      {"--width 1000000 --out " + quote(out.string()), "'1000000' is not an image side"},
      {"--height -16 --out " + quote(out.string()), "is not an image side"},
      {"--steps 2147483648 --out " + quote(out.string()), "is not a number of sampling steps: give 1 to 1000"},
      {"--max-sequence-length 100000 --out " + quote(out.string()), "is not a number of text tokens"},
      {"--guidance nan --out " + quote(out.string()), "--guidance: give a number from 0 to 100"},
      {"--lora-scale 1e300 --out " + quote(out.string()), "--lora-scale: give a number from -100 to 100"},
      {"--out " + quote((tmp / "no-such-folder" / "x.png").string()), "does not exist"},
      {"--out " + quote(tmp.path().string()), "is not a .png file name"},
      {"--out " + quote((tmp / "x.jpg").string()), "is not a .png file name"},
      {"--out ''", "--out: is empty"},
  };
  for (const Case& c : cases) {
    const auto r = run("sample " + model + c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("loading"), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("enforce fail"), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

// The copies of the FLUX.2 pipeline folders inside the project.
fs::path flux2Fixture(const std::string& variant) {
  return strata::test::sourceDir() / "tests" / "fixtures" / "reference" / ("flux2_pipeline_" + variant + "_a");
}

// FLUX.2-dev (Mistral-3, guidance embedding) and [klein] base (Qwen3, true CFG
// against the negative prompt) from their diffusers folders: model_index.json
// says the family; the PNG carries what was asked.
TEST(SampleCli, DrawsFlux2ImagesFromTheirDiffusersFolders) {
  strata::test::TempDir tmp;
  for (const std::string variant : {"dev", "klein"}) {
    SCOPED_TRACE(variant);
    const auto out = tmp / (variant + ".png");
    std::string args = "sample " + quote((flux2Fixture(variant) / "model").string()) +
                       " --steps 2 --seed 3 --width 32 --height 48 --max-sequence-length 40 --prompt 'a red hat' "
                       "--out " +
                       quote(out.string());
    if (variant == "klein") args += " --negative-prompt blurry";
    const auto r = run(args);
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("step 2/2"), std::string::npos) << r.output;
    const auto img = strata::io::readImage(out);
    EXPECT_EQ(img.pixels.sizes().vec(), (std::vector<int64_t>{48, 32, 3}));
    EXPECT_EQ(img.text.at("prompt"), "a red hat");
    EXPECT_EQ(img.text.at("seed"), "3");
    EXPECT_EQ(img.text.at("guidance"), std::to_string(4.0));  // Flux2Pipeline's default
    if (variant == "klein") EXPECT_EQ(img.text.at("negative_prompt"), "blurry");
  }
}

// Options of the other family are refused by name before anything loads.
TEST(SampleCli, RefusesTheOtherFamilysOptions) {
  strata::test::TempDir tmp;
  const auto out = tmp / "x.png";
  struct Case {
    std::string model, args, says;
  };
  const std::string flux2 = quote((flux2Fixture("klein") / "model").string());
  const std::string flux1 = quote((fixture() / "model").string());
  const Case cases[] = {
      {flux2, "--clip " + quote((tmp / "clip.safetensors").string()), "--clip: FLUX.1's file"},
      {flux2, "--text-encoder " + quote(tmp.path().string()), "is a diffusers folder"},
      {flux2, "--distilled", "model_index.json says whether it is"},
      {flux1, "--text-encoder " + quote(tmp.path().string()), "--text-encoder: FLUX.2's text encoder"},
      {flux1, "--negative-prompt blurry", "--negative-prompt: FLUX.1 samples without a negative pass"},
      {quote((flux2Fixture("klein") / "singles" / "flux2.safetensors").string()),
       "--text-encoder " + quote(tmp.path().string()), "--vae: a single FLUX.2 transformer file needs"},
  };
  for (const Case& c : cases) {
    const auto r = run("sample " + c.model + " --prompt p --out " + quote(out.string()) + " " + c.args);
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("loading"), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

// A FLUX.2 run config with single files: the transformer, model.vae_path and
// model.text_encoder_path, with what the files do not hold (rotary axes, the VAE's
// group count) as the config gives it.
TEST(SampleCli, DrawsFlux2FromARunConfigsSingleFiles) {
  const fs::path dir = flux2Fixture("klein");
  if (!fs::exists(dir / "singles" / "flux2.safetensors")) GTEST_SKIP() << "no klein fixture";
  strata::test::TempDir tmp;
  const fs::path te = tmp / "text_encoder";
  fs::create_directories(te);
  for (const char* sub : {"text_encoder", "tokenizer"})
    for (const auto& e : fs::directory_iterator(dir / "model" / sub)) fs::copy_file(e.path(), te / e.path().filename());
  const fs::path yaml = tmp / "run.yaml";
  FILE* f = std::fopen(yaml.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f,
               "model:\n  arch: flux2\n  name_or_path: %s\n  vae_path: %s\n  text_encoder_path: %s\n"
               "  axes_dims_rope: [4, 4, 4, 4]\n  vae_norm_num_groups: 4\n  device: cpu\n"
               "datasets: [{type: synthetic, resolution: [32]}]\nsample: {sample_every: 0}\n",
               (dir / "singles" / "flux2.safetensors").c_str(), (dir / "singles" / "flux2-vae.safetensors").c_str(),
               te.c_str());
  std::fclose(f);
  const auto out = tmp / "x.png";
  const auto r = run("sample " + quote(yaml.string()) + " --prompt p --steps 2 --width 32 --height 32 --out " +
                     quote(out.string()));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto img = strata::io::readImage(out, strata::io::ImageChannels::Rgb);
  EXPECT_EQ(img.pixels.sizes().vec(), (std::vector<int64_t>{32, 32, 3}));
}

// Ctrl-C stops a sample after the current step, writes no image, exits 130.
TEST(SampleCli, CtrlCStopsAfterTheCurrentStepAndWritesNothing) {
  strata::test::TempDir tmp;
  const auto out = tmp / "x.png";
  strata::test::cli::Child child(
      {"sample", (fixture() / "model").string(), "--steps", "1000", "--seed", "7", "--max-sequence-length", "16",
       "--width", "64", "--height", "64", "--prompt", "p", "--out", out.string()},
      tmp / "sample.log");
  ASSERT_TRUE(child.started());
  // Wait for the first sampling step, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (child.output().find("step 1/1000") == std::string::npos && !child.poll() &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(child.output().find("step 1/1000"), std::string::npos) << child.output();
  const auto signalled = std::chrono::steady_clock::now();
  child.signal(SIGINT);
  ASSERT_TRUE(child.waitFor(std::chrono::seconds(30))) << child.output();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(10));
  EXPECT_EQ(child.exitCode(), 130) << child.output();
  EXPECT_NE(child.output().find("no image written"), std::string::npos) << child.output();
  EXPECT_EQ(child.output().find("step 1000/1000"), std::string::npos) << child.output();
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
