// An images run end to end on the CPU, from the flux_pipeline fixture as users
// hold it (the diffusers folder, and its single files): a folder of real
// pictures (png, jpg, webp; several sizes and aspects; a corrupt file, one too
// small, one without a caption) is cached by the fixture's VAE, T5 and CLIP, 20
// steps train, decoded samples of the configured size are written, the LoRA is
// exported and applied in families::generateImages; a second run and a resume
// take everything from the cache (no encoder call).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/ImagesRunSupport.h"
#include "common/TestSupport.h"
#include "config/RunConfig.h"
#include "families/flux/FluxImageModels.h"
#include "families/flux/FluxPlanning.h"
#include "events/EventBus.h"
#include "io/Image.h"
#include "lora/LoraFormats.h"
#include "models/clip/ClipTextConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "families/flux/FluxPipeline.h"
#include "train/ImageDataset.h"
#include "diffusion/ImagesRun.h"
#include "train/TestImages.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kSampleWidth = 48;
constexpr int64_t kSampleHeight = 32;

fs::path fixture() { return test::sourceDir() / "tests" / "fixtures" / "reference" / "flux_pipeline_a"; }

using test::blockPicture;
using test::filesIn;
using test::writeBytes;

// The dataset folder: 4 or 5 usable pictures, a corrupt one, one too small.
struct ImageSet {
  test::TempDir dir;
  bool webp = false;
  ImageSet() {
    io::writePng(dir / "a_wide.png", blockPicture(64, 96, 1));
    writeBytes(dir / "a_wide.txt", "a [trigger] red block on a gradient\n");
    writeBytes(dir / "b_tall.jpg", test::encodeJpeg(blockPicture(96, 64, 2)));
    writeBytes(dir / "b_tall.txt", "a tall picture of [trigger]");
    io::writePng(dir / "c_square.png", blockPicture(80, 80, 3));
    writeBytes(dir / "c_square.txt", "a square picture");
    io::writePng(dir / "d_nocaption.png", blockPicture(72, 128, 4));  // no caption file: default_caption
    const std::string w = test::encodeWebp(blockPicture(64, 64, 5));
    if (!w.empty() && io::webpSupported()) {
      writeBytes(dir / "e_photo.webp", w);
      writeBytes(dir / "e_photo.txt", "a webp picture");
      webp = true;
    }
    writeBytes(dir / "broken.png", test::corruptPngBytes());
    writeBytes(dir / "broken.txt", "never used");
    io::writePng(dir / "tiny.png", blockPicture(20, 20, 6));  // smaller than every bucket
  }
  int64_t usable() const { return webp ? 5 : 4; }
};

config::RunConfig runConfig(const ImageSet& images, const fs::path& out, const std::string& name) {
  config::RunConfig c;
  c.job.name = name;
  c.job.trainingFolder = out.string();
  c.model.nameOrPath = (fixture() / "model").string();
  c.model.device = config::ComputeDevice::Cpu;
  c.network.linear = 4;
  c.network.linearAlpha = 4;
  c.train.steps = 20;
  c.train.lr = 2e-3;
  c.train.dtype = config::DType::FP32;
  c.train.gradientCheckpointing = false;
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = images.dir.path().string();
  d.triggerWord = "ohwx";
  d.defaultCaption = "a photo";
  d.resolution = {32, 64};
  d.flipX = true;
  d.numRepeats = 2;
  c.datasets = {d};
  c.sample.prompts = {"[trigger] on a table"};
  c.sample.sampleEvery = 10;
  c.sample.sampleSteps = 2;
  c.sample.width = kSampleWidth;
  c.sample.height = kSampleHeight;
  c.save.saveEvery = 10;
  c.save.exportFormats = {config::ExportFormat::Diffusers, config::ExportFormat::Kohya};
  return c;
}

// The fixture's single files; the model folder is the tokenizer folder. What the
// files do not hold comes from the config, as a user would give it.
config::RunConfig singlesConfig(const ImageSet& images, const fs::path& out, const std::string& name) {
  config::RunConfig c = runConfig(images, out, name);
  const fs::path s = fixture() / "singles";
  c.model.nameOrPath = (s / "flux1.safetensors").string();
  c.model.vaePath = (s / "ae.safetensors").string();
  c.model.clipPath = (s / "clip_l.safetensors").string();
  c.model.t5Path = (s / "t5xxl.safetensors").string();
  c.model.tokenizerPath = (fixture() / "model").string();
  c.model.axesDimsRope = {4, 6, 6};
  c.model.vaeNormNumGroups = 4;
  c.model.clipNumAttentionHeads = 4;
  return c;
}

struct Recorded {
  std::vector<events::Event> all;
  std::vector<std::string> warnings;
  std::map<std::string, events::CacheProgressEvent> lastProgress;  // per stage
  std::map<std::string, int64_t> encoded;                          // per stage, the most any event said
  std::string failure;
  void operator()(const events::Event& e) {
    all.push_back(e);
    if (const auto* w = std::get_if<events::WarningEvent>(&e)) warnings.push_back(w->message);
    if (const auto* p = std::get_if<events::CacheProgressEvent>(&e)) {
      lastProgress[p->stage] = *p;
      encoded[p->stage] = std::max(encoded[p->stage], p->encoded);
    }
    if (const auto* f = std::get_if<events::FailedEvent>(&e)) failure = f->message;
    if (const auto* f = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& p : f->problems) failure += p + "\n";
  }
  int warningsMentioning(const std::string& needle) const {
    int n = 0;
    for (const auto& w : warnings) n += w.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

RunOutcome runTrainer(Trainer& t, Recorded& rec, events::EventBus& bus) {
  auto sub = bus.subscribe([&rec](const events::Event& e) { rec(e); });
  return t.run();
}

// Every sample PNG of the run (common/ImagesRunSupport.h).
void expectSamples(const fs::path& runDir, const std::vector<int64_t>& steps) {
  test::expectSamplePngs(runDir, steps, {kSampleWidth, kSampleHeight, "ohwx on a table"});
}

// The exported LoRA reads back and changes what the pipeline generates.
void expectLoraAppliesInThePipeline(const families::PipelineFiles& files, const fs::path& lora) {
  ASSERT_TRUE(fs::is_regular_file(lora)) << lora;
  families::PipelineOptions o;
  o.text.maxSequenceLength = 16;  // the fixture's joint_attention_dim 32 -> 16 text tokens in training
  auto pipe = families::FluxPipeline::load(files, o);
  const auto content = lora::readLoraFile(lora, flux::FluxLoraRules(pipe->transformer().config()));
  EXPECT_FALSE(content.modules.empty());
  families::SampleRequest r;
  r.prompts = {"ohwx on a table"};
  r.steps = 2;
  r.width = kSampleWidth;
  r.height = kSampleHeight;
  r.seed = 3;
  const auto base = families::generateImages(*pipe, r).images;
  r.lora = lora;
  const auto with = families::generateImages(*pipe, r).images;
  EXPECT_EQ(with.sizes().vec(), (std::vector<int64_t>{1, 3, kSampleHeight, kSampleWidth}));
  EXPECT_GT((with - base).abs().max().item<double>(), 1e-6) << "the trained LoRA does not change the image";
}

}  // namespace

TEST(ImagesRun, TrainsFromTheDiffusersFolderThenReusesTheCache) {
  ImageSet images;
  test::TempDir out;
  const auto cfg = runConfig(images, out.path(), "imgs");

  // 1. A fresh run: the cache is built, 20 steps, samples at 0, 10, 20, exports.
  {
    events::EventBus bus;
    Recorded rec;
    Trainer t(cfg, bus);
    ASSERT_EQ(runTrainer(t, rec, bus), RunOutcome::Finished) << rec.failure;
    // Each skipped file and the missing caption, once each.
    EXPECT_EQ(rec.warningsMentioning("broken.png"), 1);
    EXPECT_EQ(rec.warningsMentioning("tiny.png"), 1);
    EXPECT_EQ(rec.warningsMentioning("without a caption file"), 1);
    EXPECT_EQ(rec.warningsMentioning("d_nocaption.png"), 1);
    // Entries: usable images x resolutions they cover x 2 flips (all cover 32 and 64).
    const int64_t views = images.usable() * 2 * 2;
    ASSERT_TRUE(rec.lastProgress.count("latents"));
    EXPECT_EQ(rec.lastProgress.at("latents").done, views);
    EXPECT_EQ(rec.encoded.at("latents"), views);
    EXPECT_EQ(rec.encoded.at("text"), images.usable() + 1);  // distinct captions + the empty one
    EXPECT_EQ(rec.encoded.at("sample prompts"), 1);
    std::printf("[images run] CPU, fixture shapes: VAE %.1f images/s, T5 + CLIP %.1f captions/s (%s)\n",
                rec.lastProgress.at("latents").itemsPerSecond, rec.lastProgress.at("text").itemsPerSecond,
                images.webp ? "png, jpg, webp" : "png, jpg; this build writes no webp");
    const fs::path cache = images.dir.path() / kCacheFolderName;
    EXPECT_EQ(filesIn(cache / "latents"), views);
    EXPECT_EQ(filesIn(cache / "text"), images.usable() + 2);  // + "ohwx on a table"
    expectSamples(t.runDir(), {0, 10, 20});
    expectLoraAppliesInThePipeline(families::PipelineFiles::fromDiffusersFolder(fixture() / "model"),
                                   t.runDir() / "exports" / "imgs_diffusers.safetensors");
    EXPECT_TRUE(fs::is_regular_file(t.runDir() / "exports" / "imgs_kohya.safetensors"));
  }

  // 2. Another run on the same folder, stopped at step 5, then resumed: no encoder call in either.
  const fs::path second = out / "second";
  {
    events::EventBus bus;
    Recorded rec;
    TrainerOptions o;
    o.runDir = second;
    o.stopAfterStep = 5;
    Trainer t(runConfig(images, out.path(), "imgs2"), bus, o);
    ASSERT_EQ(runTrainer(t, rec, bus), RunOutcome::Stopped) << rec.failure;
    for (const char* stage : {"latents", "text", "sample prompts"}) {
      ASSERT_TRUE(rec.lastProgress.count(stage)) << stage;
      EXPECT_EQ(rec.encoded.at(stage), 0) << stage << " was encoded again";
      EXPECT_EQ(rec.lastProgress.at(stage).done, rec.lastProgress.at(stage).total) << stage;
    }
  }
  {
    events::EventBus bus;
    Recorded rec;
    auto t = Trainer::resumeFrom(second, bus);
    ASSERT_EQ(runTrainer(*t, rec, bus), RunOutcome::Finished) << rec.failure;
    for (const char* stage : {"latents", "text", "sample prompts"})
      EXPECT_EQ(rec.encoded.at(stage), 0) << stage << " was encoded again on resume";
    expectSamples(second, {10, 20});
  }
}

TEST(ImagesRun, TrainsFromTheSingleFiles) {
  ImageSet images;
  test::TempDir out;
  events::EventBus bus;
  Recorded rec;
  Trainer t(singlesConfig(images, out.path(), "singles"), bus);
  ASSERT_EQ(runTrainer(t, rec, bus), RunOutcome::Finished) << rec.failure;
  EXPECT_GT(rec.encoded.at("latents"), 0);
  EXPECT_EQ(rec.warningsMentioning("broken.png"), 1);
  expectSamples(t.runDir(), {0, 10, 20});
  const fs::path s = fixture() / "singles";
  auto files =
      families::PipelineFiles::fromSingleFiles(s / "flux1.safetensors", s / "ae.safetensors", s / "clip_l.safetensors",
                                               s / "t5xxl.safetensors", fixture() / "model");
  files.axesDimsRope = {4, 6, 6};
  files.vaeHints.normNumGroups = 4;
  files.text.clipConfig =
      clip::ClipTextConfig::fromTransformersJsonFile(fixture() / "model" / "text_encoder" / "config.json");
  expectLoraAppliesInThePipeline(files, t.runDir() / "exports" / "singles_diffusers.safetensors");
}

// The single files hold the diffusers folder's weights: the same training latents and embeddings.
TEST(ImagesRun, SingleFilesEncodeLikeTheDiffusersFolder) {
  ImageSet images;
  test::TempDir out;
  const auto folderCfg = runConfig(images, out.path(), "a");
  const auto singleCfg = singlesConfig(images, out.path(), "b");
  const auto fc = families::planFluxConfig(folderCfg.model);
  DatasetContext ctx;
  ctx.latentChannels = fc.latentChannels();
  ctx.textDim = fc.jointAttentionDim;
  ctx.pooledDim = fc.pooledProjectionDim;
  ctx.textTokens = defaultTextTokens(ctx.textDim);
  auto a = families::makeFluxImageModels(folderCfg, ctx, at::kCPU);
  auto b = families::makeFluxImageModels(singleCfg, ctx, at::kCPU);
  EXPECT_NE(a->imageModelId(), b->imageModelId());  // other files: other cache keys
  const auto pixels = io::imageToFloatChw(blockPicture(64, 96, 1)).unsqueeze(0).mul(2).sub(1);  // [1, 3, 64, 96]
  const auto la = a->encodeImages(pixels), lb = b->encodeImages(pixels);
  EXPECT_EQ(la.sizes().vec(), (std::vector<int64_t>{1, ctx.latentChannels, 8, 12}));
  EXPECT_TRUE(test::allClose(lb, la, 1e-5, 1e-4));
  const auto ta = a->encodeTexts({"ohwx on a table"}), tb = b->encodeTexts({"ohwx on a table"});
  EXPECT_EQ(ta.at(0).txt.sizes().vec(), (std::vector<int64_t>{ctx.textTokens, ctx.textDim}));
  EXPECT_TRUE(test::allClose(tb.at(0).txt, ta.at(0).txt, 1e-5, 1e-4));
  EXPECT_TRUE(test::allClose(tb.at(0).pooled, ta.at(0).pooled, 1e-5, 1e-4));
  a->releaseTextEncoders();
  EXPECT_THROW(a->encodeTexts({"x"}), Error);
}

TEST(ImagesRun, SamplePromptsGetTheTriggerWordReplacedNotPrepended) {
  EXPECT_EQ(diffusion::samplePromptText("[trigger] on a table", "ohwx"), "ohwx on a table");
  EXPECT_EQ(diffusion::samplePromptText("a dog", "ohwx"), "a dog");
  EXPECT_EQ(diffusion::samplePromptText("[trigger] and [trigger]", "x"), "x and x");
  EXPECT_EQ(diffusion::samplePromptText("[trigger] dog", ""), " dog");
}

// The VAE's identity in a cache key is its content: other weights with the same
// size and mtime are another key (they re-encode); the same weights elsewhere are the same key.
TEST(ImagesRun, ModelIdentityIsTheWeightsContentNotTheirSizeAndDate) {
  ImageSet images;
  test::TempDir out;
  const char* oldXdg = std::getenv("XDG_CACHE_HOME");
  const std::string savedXdg = oldXdg ? oldXdg : "";
  ::setenv("XDG_CACHE_HOME", (out / "xdg").c_str(), 1);  // the hash memo, not the user's
  const fs::path s = fixture() / "singles";
  for (const char* n : {"ae.safetensors", "copy.safetensors"}) fs::copy_file(s / "ae.safetensors", out / n);
  auto cfg = singlesConfig(images, out.path(), "id");
  cfg.model.vaePath = (out / "ae.safetensors").string();
  const auto fc = families::planFluxConfig(cfg.model);
  DatasetContext ctx;
  ctx.latentChannels = fc.latentChannels();
  ctx.textDim = fc.jointAttentionDim;
  ctx.pooledDim = fc.pooledProjectionDim;
  ctx.textTokens = defaultTextTokens(ctx.textDim);
  const std::string before = families::makeFluxImageModels(cfg, ctx, at::kCPU)->imageModelId();
  auto copyCfg = cfg;
  copyCfg.model.vaePath = (out / "copy.safetensors").string();
  EXPECT_EQ(families::makeFluxImageModels(copyCfg, ctx, at::kCPU)->imageModelId(), before);
  // One weight changed in place: same size, and the old mtime put back.
  const fs::path vae = out / "ae.safetensors";
  const auto mtime = fs::last_write_time(vae);
  const auto size = fs::file_size(vae);
  {
    std::fstream f(vae, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 3));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put(static_cast<char>(c ^ 0x01));
  }
  fs::last_write_time(vae, mtime);
  ASSERT_EQ(fs::file_size(vae), size);
  EXPECT_NE(families::makeFluxImageModels(cfg, ctx, at::kCPU)->imageModelId(), before);
  if (oldXdg)
    ::setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}

// T5 and CLIP are loaded only when something must be encoded, long after their
// hashes named the text cache's key: files replaced in between are refused, not
// cached under the old files' key.
TEST(ImagesRun, TextEncodersReplacedAfterTheRunStartedAreRefused) {
  ImageSet images;
  test::TempDir out;
  const char* oldXdg = std::getenv("XDG_CACHE_HOME");
  const std::string savedXdg = oldXdg ? oldXdg : "";
  ::setenv("XDG_CACHE_HOME", (out / "xdg").c_str(), 1);
  const fs::path s = fixture() / "singles";
  for (const char* n : {"ae.safetensors", "clip_l.safetensors", "t5xxl.safetensors"}) fs::copy_file(s / n, out / n);
  auto cfg = singlesConfig(images, out.path(), "late");
  cfg.model.vaePath = (out / "ae.safetensors").string();
  cfg.model.clipPath = (out / "clip_l.safetensors").string();
  cfg.model.t5Path = (out / "t5xxl.safetensors").string();
  const auto fc = families::planFluxConfig(cfg.model);
  DatasetContext ctx;
  ctx.latentChannels = fc.latentChannels();
  ctx.textDim = fc.jointAttentionDim;
  ctx.pooledDim = fc.pooledProjectionDim;
  ctx.textTokens = defaultTextTokens(ctx.textDim);
  {
    auto models = families::makeFluxImageModels(cfg, ctx, at::kCPU);
    EXPECT_EQ(models->encodeTexts({"a"}).size(), 1u);  // unchanged: loads
  }
  auto models = families::makeFluxImageModels(cfg, ctx, at::kCPU);
  {
    const fs::path t5 = out / "t5xxl.safetensors";
    const auto size = fs::file_size(t5);
    std::fstream f(t5, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - 3));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put(static_cast<char>(c ^ 0x01));
  }
  try {
    models->encodeTexts({"a"});
    ADD_FAILURE() << "expected LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("changed since the run started"), std::string::npos) << e.what();
  }
  if (oldXdg)
    ::setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}
