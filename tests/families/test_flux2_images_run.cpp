// A FLUX.2 images run end to end on the CPU, from the flux2_pipeline fixtures as
// users hold them (the diffusers folders of [klein] base and dev): a folder of PNGs
// (several sizes and aspects, a corrupt file, one without a caption) is cached by
// the fixture's VAE and text encoder, 20 steps train with finite losses, samples
// decoded by the VAE at the configured size are written (true CFG for [klein] base,
// the guidance embedding for dev), the exported LoRA changes what the pipeline
// draws, and a second run encodes nothing. Caption
// dropout drops to the empty prompt's embedding as the pipeline encodes "".
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/ImagesRunSupport.h"
#include "common/TestSupport.h"
#include "config/RunConfig.h"
#include "config/Validator.h"
#include "diffusion/GenerateImages.h"
#include "diffusion/ImagesRun.h"
#include "events/EventBus.h"
#include "families/flux2/Flux2ImageModels.h"
#include "families/flux2/Flux2Pipeline.h"
#include "io/Image.h"
#include "lora/LoraFormats.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Transformer.h"
#include "train/Datasets.h"
#include "train/ImageDataset.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

using test::filesIn;

constexpr int64_t kSampleWidth = 48;
constexpr int64_t kSampleHeight = 32;

fs::path fixture(const std::string& variant) {
  return test::sourceDir() / "tests" / "fixtures" / "reference" / ("flux2_pipeline_" + variant + "_a");
}

// Three usable PNGs of other sizes and aspects (one without a caption), a corrupt one.
struct ImageSet {
  test::TempDir dir;
  ImageSet() {
    io::writePng(dir / "a_wide.png", test::blockPicture(48, 80, 1));
    test::writeBytes(dir / "a_wide.txt", "a [trigger] red block on a gradient");
    io::writePng(dir / "b_tall.png", test::blockPicture(72, 40, 2));
    test::writeBytes(dir / "b_tall.txt", "a tall picture");
    io::writePng(dir / "c_nocaption.png", test::blockPicture(56, 56, 3));  // default_caption
    test::writeBytes(dir / "broken.png", test::corruptPngBytes());
    test::writeBytes(dir / "broken.txt", "never used");
  }
  static constexpr int64_t kUsable = 3;
};

config::RunConfig runConfig(const ImageSet& images, const fs::path& out, const std::string& variant,
                            const std::string& name) {
  config::RunConfig c;
  c.job.name = name;
  c.job.trainingFolder = out.string();
  c.model.arch = "flux2";
  c.model.nameOrPath = (fixture(variant) / "model").string();
  c.model.device = config::ComputeDevice::Cpu;
  c.network.linear = 2;
  c.network.linearAlpha = 2;
  c.train.steps = 20;
  c.train.lr = 2e-3;
  c.train.dtype = config::DType::FP32;
  c.train.gradientCheckpointing = false;
  c.train.captionDropoutRate = 0.3;
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = images.dir.path().string();
  d.triggerWord = "sks";
  d.defaultCaption = "a photo";
  d.resolution = {32};
  d.flipX = true;
  c.datasets = {d};
  c.sample.prompts = {"[trigger] on a table"};
  c.sample.sampleEvery = 10;
  c.sample.sampleSteps = 2;
  c.sample.guidanceScale = 4.0;
  c.sample.width = kSampleWidth;
  c.sample.height = kSampleHeight;
  c.save.saveEvery = 0;
  c.save.exportFormats = {config::ExportFormat::Diffusers};
  return c;
}

struct Recorded {
  std::vector<std::string> warnings;
  std::vector<double> losses;
  std::map<std::string, events::CacheProgressEvent> lastProgress;  // per stage
  std::map<std::string, int64_t> encoded;                          // per stage, the most any event said
  std::string failure;
  void operator()(const events::Event& e) {
    if (const auto* w = std::get_if<events::WarningEvent>(&e)) warnings.push_back(w->message);
    if (const auto* s = std::get_if<events::StepEvent>(&e)) losses.push_back(s->loss);
    if (const auto* p = std::get_if<events::CacheProgressEvent>(&e)) {
      lastProgress[p->stage] = *p;
      encoded[p->stage] = std::max(encoded[p->stage], p->encoded);
    }
    if (const auto* f = std::get_if<events::FailedEvent>(&e)) failure += f->message;
    if (const auto* f = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& p : f->problems) failure += p + "\n";
  }
  int warningsMentioning(const std::string& needle) const {
    int n = 0;
    for (const auto& w : warnings) n += w.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

Recorded runToEnd(const config::RunConfig& cfg, fs::path* runDir = nullptr) {
  Recorded rec;
  events::EventBus bus;
  auto sub = bus.subscribe([&rec](const events::Event& e) { rec(e); });
  Trainer t(cfg, bus);
  EXPECT_EQ(t.run(), RunOutcome::Finished) << rec.failure;
  if (runDir) *runDir = t.runDir();
  return rec;
}

// Every sample PNG of the run (common/ImagesRunSupport.h).
void expectSamples(const fs::path& runDir, const std::vector<int64_t>& steps) {
  test::expectSamplePngs(runDir, steps, {kSampleWidth, kSampleHeight, "sks on a table"});
}

// The exported LoRA reads back with FLUX.2's rules and changes what the pipeline draws.
void expectLoraAppliesInThePipeline(const fs::path& model, const fs::path& lora) {
  ASSERT_TRUE(fs::is_regular_file(lora)) << lora;
  auto pipe = families::Flux2Pipeline::load(families::Flux2PipelineFiles::fromDiffusersFolder(model));
  const auto content = lora::readLoraFile(lora, flux2::Flux2LoraRules(pipe->transformer().config()));
  EXPECT_FALSE(content.modules.empty());
  diffusion::ImageRequest r;
  r.prompts = {"sks on a table"};
  r.steps = 2;
  r.guidance = 4.0;
  r.width = kSampleWidth;
  r.height = kSampleHeight;
  r.seed = 3;
  const auto base = diffusion::generateImages(pipe->textEncoder(), pipe->codec(), pipe->denoiser(), r).images;
  r.lora = lora;
  const auto with = diffusion::generateImages(pipe->textEncoder(), pipe->codec(), pipe->denoiser(), r).images;
  EXPECT_EQ(with.sizes().vec(), (std::vector<int64_t>{1, 3, kSampleHeight, kSampleWidth}));
  EXPECT_GT((with - base).abs().max().item<double>(), 1e-6) << "the trained LoRA does not change the image";
}

void trainsThenReusesTheCache(const std::string& variant) {
  if (!fs::exists(fixture(variant) / "model" / "model_index.json"))
    GTEST_SKIP() << "no " << variant << " fixture at " << fixture(variant);
  ImageSet images;
  test::TempDir out;
  fs::path runDir;
  {
    const Recorded rec = runToEnd(runConfig(images, out.path(), variant, "f2"), &runDir);
    EXPECT_EQ(rec.warningsMentioning("broken.png"), 1);
    EXPECT_EQ(rec.warningsMentioning("without a caption file"), 1);
    // Entries: the usable images at 32 px, each also mirrored.
    const int64_t views = ImageSet::kUsable * 2;
    ASSERT_TRUE(rec.lastProgress.count("latents"));
    EXPECT_EQ(rec.encoded.at("latents"), views);
    EXPECT_EQ(rec.encoded.at("text"), ImageSet::kUsable + 1);  // the captions + the empty one
    EXPECT_EQ(rec.encoded.at("sample prompts"), 1);
    const fs::path cache = images.dir.path() / kCacheFolderName;
    EXPECT_EQ(filesIn(cache / "latents"), views);
    EXPECT_EQ(filesIn(cache / "text"), ImageSet::kUsable + 2);  // + "sks on a table"
    ASSERT_EQ(rec.losses.size(), 20u);
    for (double l : rec.losses) EXPECT_TRUE(std::isfinite(l)) << l;
    expectSamples(runDir, {0, 10, 20});
    expectLoraAppliesInThePipeline(fixture(variant) / "model", runDir / "exports" / "f2_diffusers.safetensors");
  }
  {
    // The same folder again: everything from the cache, no encoder call.
    const Recorded rec = runToEnd(runConfig(images, out.path(), variant, "f2b"), &runDir);
    for (const char* stage : {"latents", "text", "sample prompts"}) {
      ASSERT_TRUE(rec.lastProgress.count(stage)) << stage;
      EXPECT_EQ(rec.encoded.at(stage), 0) << stage << " was encoded again";
      EXPECT_EQ(rec.lastProgress.at(stage).done, rec.lastProgress.at(stage).total) << stage;
    }
    for (double l : rec.losses) EXPECT_TRUE(std::isfinite(l)) << l;
    expectSamples(runDir, {20});
  }
}

}  // namespace

TEST(Flux2ImagesRun, KleinBaseTrainsFromTheDiffusersFolderThenReusesTheCache) { trainsThenReusesTheCache("klein"); }

TEST(Flux2ImagesRun, DevTrainsFromTheDiffusersFolderThenReusesTheCache) { trainsThenReusesTheCache("dev"); }

// What a dropped caption becomes: the images dataset's empty prompt, which is the
// text encoder's encoding of "" as the pipeline makes it (not zeros), at the run's
// 512 tokens.
TEST(Flux2ImagesRun, CaptionDropoutIsTheEmptyPromptsEmbedding) {
  const fs::path model = fixture("klein") / "model";
  if (!fs::exists(model / "model_index.json")) GTEST_SKIP() << "no klein fixture";
  ImageSet images;
  config::RunConfig cfg;
  cfg.model.arch = "flux2";
  cfg.model.nameOrPath = model.string();
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = images.dir.path().string();
  d.resolution = {32};
  d.cacheLatentsToDisk = false;
  cfg.datasets = {d};
  DatasetContext ctx;
  ctx.latentChannels = 4;  // the fixture's in_channels 16 / 4
  ctx.textTokens = 512;
  ctx.textDim = 48;
  ctx.pooledDim = 0;
  events::EventBus bus;
  diffusion::ImagesRun run(families::makeFlux2ImageModels(cfg, ctx, at::kCPU), cfg, ctx, bus);
  ctx.encoders = &run.encoders();
  const auto data = makeDatasets(cfg.datasets, ctx);
  const TextEmbedding empty = data->emptyPrompt();
  ASSERT_EQ(empty.txt.sizes().vec(), (std::vector<int64_t>{512, 48}));
  EXPECT_EQ(empty.pooled.numel(), 0);

  // The pipeline's defaults: max_sequence_length 512, float32.
  auto pipeline = families::Flux2Pipeline::load(families::Flux2PipelineFiles::fromDiffusersFolder(model));
  const at::Tensor expected = pipeline->textEncoder().encode({""}).tokens[0];  // [512, 48]
  ASSERT_EQ(expected.sizes().vec(), empty.txt.sizes().vec());
  EXPECT_TRUE(at::allclose(empty.txt, expected, 1e-5, 1e-5));
  EXPECT_GT(empty.txt.abs().max().item<double>(), 1e-3) << "the empty prompt's embedding is zeros";
  // An item's caption is something else: the embedding of its own text.
  EXPECT_FALSE(at::allclose(data->item(0).txt, empty.txt));
}

// The validator: images datasets and samples allowed for flux2, synthetic samples refused
// with the reason, the single-file keys named.
TEST(Flux2ImagesRun, ValidatorTakesImagesAndNamesTheSingleFileKeys) {
  ImageSet images;
  test::TempDir out;
  auto cfg = runConfig(images, out.path(), "klein", "v");
  auto problems = [](const config::RunConfig& c) {
    std::string all;
    for (const auto& p : config::validate(c))
      if (p.severity == config::Severity::Error) all += p.key + ": " + p.message + "\n";
    return all;
  };
  EXPECT_EQ(problems(cfg), "");

  auto synthetic = cfg;
  synthetic.datasets.front().type = config::DatasetType::Synthetic;
  synthetic.datasets.front().folderPath.clear();
  EXPECT_NE(problems(synthetic).find("sample.sample_every: a flux2 run samples only with an images dataset"),
            std::string::npos)
      << problems(synthetic);

  auto latents = cfg;
  latents.datasets.front().type = config::DatasetType::Latents;
  EXPECT_NE(problems(latents).find("datasets[0].type"), std::string::npos);

  auto single = cfg;
  single.model.nameOrPath = (fixture("klein") / "singles" / "flux2.safetensors").string();
  const std::string s = problems(single);
  EXPECT_NE(s.find("model.vae_path: an images run from a transformer alone"), std::string::npos) << s;
  EXPECT_NE(s.find("model.text_encoder_path: an images run from a transformer alone"), std::string::npos) << s;
  single.model.vaePath = (out / "missing.safetensors").string();
  single.model.textEncoderPath = (fixture("klein") / "model" / "text_encoder").string();
  const std::string s2 = problems(single);
  EXPECT_NE(s2.find("model.vae_path: file not found"), std::string::npos) << s2;
  EXPECT_EQ(s2.find("model.text_encoder_path"), std::string::npos) << s2;
}

// The BFL single files: the transformer, flux2-vae.safetensors (model.vae_path) and
// the text encoder's folder with its tokenizer (model.text_encoder_path); what the
// files do not hold as a user gives it.
TEST(Flux2ImagesRun, TrainsFromTheSingleFiles) {
  const fs::path dir = fixture("klein");
  if (!fs::exists(dir / "singles" / "flux2.safetensors")) GTEST_SKIP() << "no klein fixture";
  ImageSet images;
  test::TempDir out;
  // A text encoder folder as transformers saves it: config, weights and tokenizer together.
  const fs::path te = out / "text_encoder";
  fs::create_directories(te);
  for (const char* sub : {"text_encoder", "tokenizer"})
    for (const auto& e : fs::directory_iterator(dir / "model" / sub)) fs::copy_file(e.path(), te / e.path().filename());
  auto cfg = runConfig(images, out.path(), "klein", "singles");
  cfg.model.nameOrPath = (dir / "singles" / "flux2.safetensors").string();
  cfg.model.vaePath = (dir / "singles" / "flux2-vae.safetensors").string();
  cfg.model.textEncoderPath = te.string();
  cfg.model.axesDimsRope = {4, 4, 4, 4};
  cfg.model.vaeNormNumGroups = 4;
  cfg.train.steps = 2;
  cfg.sample.sampleEvery = 2;
  fs::path runDir;
  const Recorded rec = runToEnd(cfg, &runDir);
  ASSERT_EQ(rec.losses.size(), 2u);
  for (double l : rec.losses) EXPECT_TRUE(std::isfinite(l)) << l;
  expectSamples(runDir, {0, 2});
}

// random_weights: a random FLUX.2 VAE and a random text encoder at the shapes the
// transformer implies, with the tokenizer of model.tokenizer_path.
TEST(Flux2ImagesRun, TrainsWithRandomWeightsAndATokenizerFolder) {
  const fs::path tok = fixture("klein") / "model" / "tokenizer";
  if (!fs::exists(tok / "tokenizer.json")) GTEST_SKIP() << "no klein fixture";
  ImageSet images;
  test::TempDir out;
  auto cfg = runConfig(images, out.path(), "klein", "random");
  cfg.model.nameOrPath.clear();
  cfg.model.randomWeights = true;
  cfg.model.preset = "tiny";
  cfg.model.guidanceEmbeds = false;  // [klein]-like: the Qwen3 template, true CFG
  cfg.train.steps = 2;
  cfg.sample.sampleEvery = 2;
  // No tokenizer: refused before anything loads, naming the key.
  {
    auto none = cfg;
    std::string all;
    for (const auto& p : config::validate(none))
      if (p.severity == config::Severity::Error) all += p.key + ": " + p.message + "\n";
    EXPECT_NE(all.find("model.tokenizer_path: an images run with random_weights still needs FLUX.2's tokenizer"),
              std::string::npos)
        << all;
  }
  cfg.model.tokenizerPath = tok.string();
  fs::path runDir;
  const auto t0 = std::chrono::steady_clock::now();
  const Recorded rec = runToEnd(cfg, &runDir);
  std::printf("[flux2 random] %.1f s; latents %.1f/s text %.1f/s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              rec.lastProgress.at("latents").itemsPerSecond, rec.lastProgress.at("text").itemsPerSecond);
  ASSERT_EQ(rec.losses.size(), 2u);
  for (double l : rec.losses) EXPECT_TRUE(std::isfinite(l)) << l;
  expectSamples(runDir, {0, 2});
}

TEST(Flux2ImagesRun, RandomTextEncoderIsTheRealModelsShapeAtTheTransformersWidth) {
  const auto dev = families::flux2RandomTextConfig(families::Flux2TextEncoderKind::kMistral3, 15360);
  EXPECT_EQ(dev.hiddenSize, 5120);  // Mistral-Small-3.1: FLUX.2-dev's 3 x 5120
  EXPECT_EQ(dev.intermediateSize, 32768);
  EXPECT_EQ(dev.numHiddenLayers, 40);
  const auto klein = families::flux2RandomTextConfig(families::Flux2TextEncoderKind::kQwen3, 96);
  EXPECT_EQ(klein.hiddenSize, 32);
  EXPECT_EQ(klein.numAttentionHeads * klein.headDim, 32);  // a test width: 4 heads over it
  const auto klein4b = families::flux2RandomTextConfig(families::Flux2TextEncoderKind::kQwen3, 7680);
  EXPECT_EQ(klein4b.hiddenSize, 2560);  // Qwen3-4B
  EXPECT_EQ(klein4b.intermediateSize, 9728);
  EXPECT_EQ(klein4b.headDim, 128);
  EXPECT_EQ(klein.modelType, "qwen3");
  EXPECT_TRUE(klein.qkNorm);
  EXPECT_THROW(families::flux2RandomTextConfig(families::Flux2TextEncoderKind::kQwen3, 100), ConfigError);
}

// The planner sees an images run's text encoder and VAE, sized from the folder's config files.
TEST(Flux2ImagesRun, ThePlanCountsTheTextEncoderAndTheVae) {
  if (!fs::exists(fixture("klein") / "model" / "model_index.json")) GTEST_SKIP() << "no klein fixture";
  ImageSet images;
  test::TempDir out;
  const auto cfg = runConfig(images, out.path(), "klein", "plan");
  std::string note;
  const auto modules = families::flux2OtherModules(cfg, "cpu", &note);
  ASSERT_EQ(modules.size(), 2u) << note;
  EXPECT_EQ(modules[0].name, "text encoder");
  EXPECT_TRUE(modules[0].freedBeforeTraining);
  EXPECT_GT(modules[0].paramCount, 0);
  EXPECT_EQ(modules[1].name, "VAE");
  EXPECT_GT(modules[1].trainingPeakBytes, 0) << "the samples are decoded during training";
  EXPECT_NE(note.find("qwen3 text encoder"), std::string::npos) << note;
  auto synthetic = cfg;
  synthetic.datasets.front().type = config::DatasetType::Synthetic;
  EXPECT_TRUE(families::flux2OtherModules(synthetic, "cpu", &note).empty());
}
