// The installed strata-train (the program a user runs) trains FLUX.2 end to end
// from the flux2_pipeline fixtures' diffusers folders, [klein] base and dev, on an
// image folder written here: several sizes and aspects (PNG and JPEG), a corrupt
// file, one picture without a caption, captions with the trigger word. Checked
// from what the program prints and writes: the cache is built (images, latents and
// captions counted, the corrupt file named), 20 steps, the sample PNGs at the
// configured size, the exported LoRA reads back and holds what `strata-train
// export` writes from the checkpoint, `strata-train sample` with it draws a PNG of
// the asked size that differs from the base model's, and a second run on the same
// folder encodes nothing and leaves the cache as it was.
//
// ctest: apps.InstalledFlux2Images.* (label apps), after apps.install has
// installed the build into <build>/installed-for-tests; STRATA_INSTALLED_BIN
// names another folder holding strata-train (an installed package: /usr/bin).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/CliProcess.h"
#include "common/ImagesRunSupport.h"
#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "io/Image.h"
#include "lora/LoraFormats.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2LoraRules.h"
#include "train/ImageDataset.h"
#include "train/TestImages.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using test::filesIn;

constexpr int64_t kSteps = 20;
constexpr int64_t kSampleEvery = 10;
constexpr int64_t kSampleWidth = 48;  // the run's samples
constexpr int64_t kSampleHeight = 32;
constexpr int64_t kAskedWidth = 32;  // what `strata-train sample` is asked for
constexpr int64_t kAskedHeight = 48;
constexpr int64_t kRank = 2;
const std::vector<int64_t> kResolutions = {32, 48};
const char* const kTrigger = "sks";
const char* const kSamplePrompt = "[trigger] on a table";
const char* const kSampledPrompt = "sks on a table";

fs::path installedStrataTrain() {
  const char* env = std::getenv("STRATA_INSTALLED_BIN");
  return fs::path(env && *env ? env : STRATA_INSTALLED_BIN_DIR) / "strata-train";
}

// Every flux2_pipeline fixture of the variant ("dev", "klein"; base and distilled):
// the run holds for each folder of the kind, not only for the one this project has.
std::vector<fs::path> pipelineFolders(const std::string& variant) {
  std::vector<fs::path> out;
  for (const auto& [dir, manifest] : test::fixturesOfKind("flux2_pipeline"))
    if (manifest.value("variant", "") == variant) out.push_back(dir / "model");
  return out;
}

// The dataset folder. Every usable picture covers every bucket of kResolutions,
// so each gives one view per resolution, and its mirror (flip_x).
struct ImageFolder {
  test::TempDir dir;
  int64_t usable = 0;
  int64_t captions = 0;  // distinct caption texts trained (default_caption counted once)
  const std::string noCaption = "c_square.png";
  ImageFolder() {
    io::writePng(dir / "a_wide.png", test::blockPicture(64, 96, 1));  // 3:2
    test::writeBytes(dir / "a_wide.txt", "a [trigger] red block on a gradient\n");
    test::writeBytes(dir / "b_tall.jpg", test::encodeJpeg(test::blockPicture(80, 48, 2)));  // 3:5
    test::writeBytes(dir / "b_tall.txt", "a tall picture");                // the trigger word goes in front
    io::writePng(dir / noCaption, test::blockPicture(64, 64, 3));          // no caption file: default_caption
    io::writePng(dir / "d_panorama.png", test::blockPicture(48, 112, 4));  // 7:3
    test::writeBytes(dir / "d_panorama.txt", "[trigger] far and wide");
    usable = 4;
    captions = 4;
    test::writeBytes(dir / "broken.png", test::corruptPngBytes());
    test::writeBytes(dir / "broken.txt", "never used");
  }
  int64_t views() const { return usable * static_cast<int64_t>(kResolutions.size()) * 2; }
  fs::path cache() const { return dir.path() / train::kCacheFolderName; }
};

std::string runYaml(const ImageFolder& images, const fs::path& trainingFolder, const fs::path& model) {
  std::ostringstream y;
  y << "job:\n  name: first\n  training_folder: \"" << trainingFolder.string() << "\"\n"
    << "model:\n  arch: flux2\n  name_or_path: \"" << model.string() << "\"\n  device: cpu\n"
    << "network:\n  linear: " << kRank << "\n  linear_alpha: " << kRank << "\n"
    << "train:\n  steps: " << kSteps << "\n  batch_size: 1\n  lr: 0.002\n  dtype: fp32\n"
    << "  gradient_checkpointing: false\n  caption_dropout_rate: 0.2\n  seed: 5\n"
    << "datasets:\n  - type: images\n    folder_path: \"" << images.dir.path().string() << "\"\n"
    << "    trigger_word: " << kTrigger << "\n    default_caption: a photo\n    flip_x: true\n"
    << "    resolution: [";
  for (size_t i = 0; i < kResolutions.size(); ++i) y << (i ? ", " : "") << kResolutions[i];
  y << "]\n"
    << "sample:\n  sample_every: " << kSampleEvery << "\n  sample_steps: 2\n  guidance_scale: 4.0\n"
    << "  width: " << kSampleWidth << "\n  height: " << kSampleHeight << "\n  prompts:\n    - \"" << kSamplePrompt
    << "\"\n"
    << "save:\n  save_every: 0\n  dtype: fp32\n  export_formats: [diffusers]\n";
  return y.str();
}

struct Ran {
  int exitCode = -1;
  std::string output;
  double seconds = 0;
};

Ran runInstalled(const std::vector<std::string>& args, const fs::path& log) {
  Ran r;
  const auto t0 = std::chrono::steady_clock::now();
  r.exitCode = test::cli::runProgram(installedStrataTrain(), args, log, &r.output);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The first capture of the first line matching `re`; "" when none does.
std::string firstCapture(const std::string& output, const std::regex& re) {
  std::smatch m;
  for (const auto& line : linesOf(output))
    if (std::regex_match(line, m, re)) return m[1].str();
  return "";
}

// What the run printed when a caching stage ended: "caching STAGE D/T  E encoded, R/s"
// or "caching STAGE D/T  (all from the cache)".
struct CacheLine {
  int64_t done = -1;
  int64_t total = -1;
  int64_t encoded = -1;
};

std::map<std::string, CacheLine> cacheLines(const std::string& output) {
  static const std::regex encoded(R"(^caching (.+) (\d+)/(\d+)  (\d+) encoded, [0-9.]+/s(, peak .+)?$)");
  static const std::regex cached(R"(^caching (.+) (\d+)/(\d+)  \(all from the cache\)$)");
  std::map<std::string, CacheLine> out;
  std::smatch m;
  for (const auto& line : linesOf(output)) {
    if (std::regex_match(line, m, encoded))
      out[m[1].str()] = {std::stoll(m[2].str()), std::stoll(m[3].str()), std::stoll(m[4].str())};
    else if (std::regex_match(line, m, cached))
      out[m[1].str()] = {std::stoll(m[2].str()), std::stoll(m[3].str()), 0};
  }
  return out;
}

// The views per bucket the run printed ("  buckets: 32x32: 6 64x32: 4 ...").
std::map<std::string, int64_t> bucketCounts(const std::string& output) {
  static const std::regex bucket(R"(([0-9]+x[0-9]+): ([0-9]+))");
  std::map<std::string, int64_t> out;
  for (const auto& line : linesOf(output)) {
    if (line.rfind("  buckets:", 0) != 0) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), bucket), end; it != end; ++it)
      out[(*it)[1].str()] = std::stoll((*it)[2].str());
  }
  return out;
}

bool hasLine(const std::string& output, const std::string& line) {
  for (const auto& l : linesOf(output))
    if (l == line) return true;
  return false;
}

bool hasLineWith(const std::string& output, const std::string& start, const std::string& part) {
  for (const auto& l : linesOf(output))
    if (l.rfind(start, 0) == 0 && l.find(part) != std::string::npos) return true;
  return false;
}

// Every file under the cache folder with its size and time of last write.
using FileStates = std::map<std::string, std::pair<uintmax_t, fs::file_time_type>>;
FileStates snapshot(const fs::path& dir) {
  FileStates out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = {e.file_size(), fs::last_write_time(e.path())};
  return out;
}

// The files added, removed or written again between two snapshots ("" when none).
std::string changedFiles(const FileStates& before, const FileStates& after) {
  std::string changed;
  for (const auto& [name, state] : after) {
    const auto it = before.find(name);
    if (it == before.end())
      changed += " added " + name;
    else if (it->second != state)
      changed += " rewritten " + name;
  }
  for (const auto& [name, state] : before)
    if (!after.count(name)) changed += " removed " + name;
  return changed;
}

// Steps 1..kSteps in the run's metrics.jsonl, each loss finite.
void expectStepsInMetrics(const fs::path& runDir) {
  std::ifstream in(runDir / "metrics.jsonl");
  ASSERT_TRUE(in) << runDir / "metrics.jsonl";
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    steps.push_back(j.at("step").get<int64_t>());
    EXPECT_TRUE(std::isfinite(j.at("loss").get<double>())) << line;
  }
  ASSERT_EQ(static_cast<int64_t>(steps.size()), kSteps);
  for (int64_t i = 0; i < kSteps; ++i) EXPECT_EQ(steps[static_cast<size_t>(i)], i + 1);
}

// The sample steps of a run of kSteps: step 0, every kSampleEvery, the last.
std::vector<int64_t> sampleSteps() {
  std::vector<int64_t> s;
  for (int64_t step = 0; step <= kSteps; step += kSampleEvery) s.push_back(step);
  if (s.back() != kSteps) s.push_back(kSteps);
  return s;
}

// A run of the installed strata-train to the end: exit 0, the run folder it names,
// 20 steps printed and in metrics.jsonl, the sample PNGs.
fs::path expectFinishedRun(const Ran& ran, const fs::path& trainingFolder, const std::string& name) {
  EXPECT_EQ(ran.exitCode, 0) << ran.output;
  const fs::path runDir = firstCapture(
      ran.output, std::regex("^training " + name + " in (.+) \\(step 0 of " + std::to_string(kSteps) + "\\)$"));
  EXPECT_EQ(runDir, trainingFolder / name) << ran.output;
  const std::string last = std::to_string(kSteps) + "/" + std::to_string(kSteps);
  EXPECT_TRUE(hasLineWith(ran.output, "step " + last + "  loss ", "")) << ran.output;
  EXPECT_TRUE(hasLineWith(ran.output, "finished: " + std::to_string(kSteps) + " steps, final loss ", "")) << ran.output;
  expectStepsInMetrics(runDir);
  for (int64_t step : sampleSteps()) {
    char name[64];
    std::snprintf(name, sizeof name, "step_%08lld_p00.png", static_cast<long long>(step));
    EXPECT_TRUE(hasLineWith(ran.output, "sample: " + (runDir / "samples" / name).string(),
                            std::string("\"") + kSampledPrompt + "\""))
        << ran.output;
  }
  test::expectSamplePngs(runDir, sampleSteps(), {kSampleWidth, kSampleHeight, kSampledPrompt});
  return runDir;
}

// (alpha / rank) up @ down of every module: what the LoRA adds to each weight.
std::map<std::string, at::Tensor> deltas(const lora::LoraFileContent& c) {
  std::map<std::string, at::Tensor> out;
  for (const auto& m : c.modules)
    out[m.modulePath] = m.up.to(at::kFloat).matmul(m.down.to(at::kFloat)).mul(m.alpha / m.down.size(0));
  return out;
}

// The run's LoRA file reads back with FLUX.2's rules: rank kRank, trained (not the
// zero start), and the same adapters as `strata-train export` writes as kohya from
// the run's checkpoint.
void expectExportReadsBack(const fs::path& model, const fs::path& runDir, const fs::path& lora, const fs::path& work) {
  ASSERT_TRUE(fs::is_regular_file(lora)) << lora;
  const flux2::Flux2LoraRules rules(flux2::Flux2Config::fromDiffusersJsonFile(model / "transformer" / "config.json"));
  const auto exported = lora::readLoraFile(lora, rules);
  ASSERT_FALSE(exported.modules.empty()) << lora;
  double largest = 0;
  for (const auto& m : exported.modules) {
    EXPECT_EQ(m.down.size(0), kRank) << m.modulePath;
    EXPECT_EQ(m.up.size(1), kRank) << m.modulePath;
    largest = std::max(largest, m.up.abs().max().item<double>());
  }
  EXPECT_GT(largest, 0.0) << lora << ": every up matrix is still zero (nothing trained)";

  const fs::path outDir = work / "exported";
  const Ran ran =
      runInstalled({"export", runDir.string(), "--format", "kohya", "--out", outDir.string()}, work / "export.log");
  ASSERT_EQ(ran.exitCode, 0) << ran.output;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(outDir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << ran.output;
  EXPECT_TRUE(hasLine(ran.output, files[0].string())) << ran.output;
  const auto kohya = lora::readLoraFile(files[0], rules);
  EXPECT_EQ(kohya.format, lora::LoraFileFormat::Kohya);
  const auto a = deltas(exported), b = deltas(kohya);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [path, delta] : a) {
    ASSERT_TRUE(b.count(path)) << path << " is in " << lora << " but not in " << files[0];
    EXPECT_TRUE(test::allClose(b.at(path), delta, 1e-6, 1e-5)) << path;
  }
}

// `strata-train sample` from the fixture folder, with and without the LoRA (at 10x):
// PNGs of the asked size, the LoRA named in its text chunks, and the LoRA changes
// the picture.
// Returns the largest change of a channel value (0..255).
double expectSampleWithTheLora(const fs::path& model, const fs::path& lora, const fs::path& work) {
  auto sample = [&](const fs::path& out, bool withLora) {
    std::vector<std::string> args = {"sample",   model.string(),
                                     "--prompt", kSampledPrompt,
                                     "--steps",  "2",
                                     "--seed",   "3",
                                     "--width",  std::to_string(kAskedWidth),
                                     "--height", std::to_string(kAskedHeight),
                                     "--out",    out.string()};
    // 20 steps of a rank-2 LoRA move a channel by a few levels of 255; ten times
    // that keeps the check clear of rounding.
    if (withLora) args.insert(args.end(), {"--lora", lora.string(), "--lora-scale", "10"});
    const Ran ran = runInstalled(args, work / (out.stem().string() + ".log"));
    EXPECT_EQ(ran.exitCode, 0) << ran.output;
    EXPECT_TRUE(hasLine(ran.output, out.string())) << ran.output;
  };
  const fs::path base = work / "base.png", with = work / "with_lora.png";
  sample(base, false);
  sample(with, true);
  if (!fs::is_regular_file(base) || !fs::is_regular_file(with)) {
    ADD_FAILURE() << "strata-train sample wrote no PNG";
    return 0;
  }
  const auto b = io::readImage(base, io::ImageChannels::Rgb), w = io::readImage(with, io::ImageChannels::Rgb);
  for (const auto* img : {&b, &w})
    EXPECT_EQ(img->pixels.sizes().vec(), (std::vector<int64_t>{kAskedHeight, kAskedWidth, 3}));
  EXPECT_EQ(w.text.count("lora") ? w.text.at("lora") : "", lora.filename().string());
  EXPECT_EQ(b.text.count("lora"), 0u);
  EXPECT_EQ(w.text.at("prompt"), kSampledPrompt);
  if (b.pixels.sizes() != w.pixels.sizes()) return 0;
  const double diff = (w.pixels.to(at::kFloat) - b.pixels.to(at::kFloat)).abs().max().item<double>();
  EXPECT_GT(diff, 0.0) << "the trained LoRA does not change the picture";
  return diff;
}

void trainsFromAnImageFolderWith(const std::string& variant, const fs::path& model) {
  SCOPED_TRACE(model.string());
  ASSERT_TRUE(fs::is_regular_file(model / "model_index.json")) << model << " has no model_index.json";
  ImageFolder images;
  test::TempDir work;
  const fs::path trainingFolder = work / "output";
  const fs::path yaml = work / "run.yaml";
  test::writeBytes(yaml, runYaml(images, trainingFolder, model));

  // 1. The first run builds the cache.
  const Ran first = runInstalled({"run", yaml.string()}, work / "first.log");
  const fs::path runDir = expectFinishedRun(first, trainingFolder, "first");
  const std::string& out = first.output;
  EXPECT_TRUE(
      hasLine(out, "dataset 0: " + std::to_string(images.usable) + " images, 1 skipped, 1 without a caption file"))
      << out;
  EXPECT_TRUE(
      hasLineWith(out, "warning: datasets[0]: skipped " + (images.dir / "broken.png").string() + ": ", "corrupt PNG"))
      << out;
  EXPECT_TRUE(hasLineWith(out, "warning: datasets[0]: 1 image(s) without a caption file", images.noCaption)) << out;
  const auto buckets = bucketCounts(out);
  int64_t bucketed = 0;
  for (const auto& [name, n] : buckets) bucketed += n;
  EXPECT_EQ(bucketed, images.views()) << out;
  EXPECT_GT(buckets.size(), kResolutions.size()) << "the aspects should fall in several buckets\n" << out;
  auto cache = cacheLines(out);
  const std::map<std::string, int64_t> expected = {
      {"latents", images.views()},
      {"text", images.captions + 1},  // + the empty prompt (caption dropout)
      {"sample prompts", 1},
  };
  for (const auto& [stage, n] : expected) {
    ASSERT_TRUE(cache.count(stage)) << "no caching line for " << stage << "\n" << out;
    EXPECT_EQ(cache.at(stage).total, n) << stage;
    EXPECT_EQ(cache.at(stage).done, n) << stage;
    EXPECT_EQ(cache.at(stage).encoded, n) << stage << ": a fresh folder is encoded whole";
  }
  EXPECT_EQ(filesIn(images.cache() / "latents"), images.views());
  EXPECT_EQ(filesIn(images.cache() / "text"), images.captions + 2);  // + the sample prompt

  const fs::path lora = firstCapture(out, std::regex(R"(^lora \(diffusers\): (.+)$)"));
  EXPECT_EQ(lora, runDir / "exports" / "first_diffusers.safetensors") << out;
  expectExportReadsBack(model, runDir, lora, work.path());
  const double loraChange = expectSampleWithTheLora(model, lora, work.path());

  // 2. A second run on the same folder: everything from the cache, nothing written there.
  const auto before = snapshot(images.cache());
  const Ran second = runInstalled({"run", yaml.string(), "--set", "job.name=second"}, work / "second.log");
  expectFinishedRun(second, trainingFolder, "second");
  cache = cacheLines(second.output);
  for (const auto& [stage, n] : expected) {
    ASSERT_TRUE(cache.count(stage)) << "no caching line for " << stage << "\n" << second.output;
    EXPECT_EQ(cache.at(stage).encoded, 0) << stage << " was encoded again\n" << second.output;
    EXPECT_EQ(cache.at(stage).done, n) << stage;
    EXPECT_TRUE(hasLine(second.output, "caching " + stage + " " + std::to_string(n) + "/" + std::to_string(n) +
                                           "  (all from the cache)"))
        << second.output;
  }
  EXPECT_EQ(changedFiles(before, snapshot(images.cache())), "") << "the second run changed the cache";

  std::printf(
      "[installed strata-train, FLUX.2 %s] first run %.1f s, second run %.1f s; the LoRA moves a sample "
      "value by up to %.0f of 255 (%s)\n",
      variant.c_str(), first.seconds, second.seconds, loraChange, model.parent_path().filename().c_str());
}

void trainsFromEveryImageFolder(const std::string& variant) {
  const fs::path program = installedStrataTrain();
  ASSERT_TRUE(fs::is_regular_file(program)) << program << " is not there: ctest runs apps.install first";
  const auto folders = pipelineFolders(variant);
  ASSERT_FALSE(folders.empty()) << "no FLUX.2 " << variant << " fixture under " << test::referenceDir()
                                << " (STRATA_REFERENCE_DIR)";
  for (const auto& model : folders) trainsFromAnImageFolderWith(variant, model);
}

}  // namespace

TEST(InstalledFlux2Images, KleinFoldersTrainSampleAndExport) { trainsFromEveryImageFolder("klein"); }

TEST(InstalledFlux2Images, DevFoldersTrainSampleAndExport) { trainsFromEveryImageFolder("dev"); }
