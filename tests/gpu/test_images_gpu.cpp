// An images run at FLUX.1-dev's shapes on one GPU (label gpu; skips without
// CUDA): random weights for all four components (transformer, VAE, T5-XXL,
// CLIP-L; no download; the tokenizers of the flux_pipeline fixture), 32
// generated 1024 px pictures cached, then 30 steps at 1024 px with gradient
// checkpointing under a 40 GB cap, samples decoded at steps 0 and 30. Prints the
// encoders' images/s and peak memory, the step time median and the peak memory
// of each stage (caching, training, sampling).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "GpuStats.h"
#include "common/TestSupport.h"
#include "families/flux/FluxImageModels.h"
#include "families/flux/FluxPlanning.h"
#include "events/EventBus.h"
#include "io/Image.h"
#include "diffusion/ImagesRun.h"
#include "train/TestImages.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;
namespace gpu = strata::test::gpu;

namespace {

constexpr int kImages = 32;
constexpr int64_t kSize = 1024;
constexpr int kSteps = 30;

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

config::RunConfig devConfig(const fs::path& images, const fs::path& out) {
  config::RunConfig c;
  c.job.name = "images_gpu";
  c.job.trainingFolder = out.string();
  c.model.preset = "flux-dev";
  c.model.randomWeights = true;
  c.model.tokenizerPath =
      (test::sourceDir() / "tests" / "fixtures" / "reference" / "flux_pipeline_a" / "model").string();
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.model.gpuMemoryLimitGb = {40};
  c.train.steps = kSteps;
  c.train.dtype = config::DType::BF16;
  c.train.gradientCheckpointing = true;
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = images.string();
  d.resolution = {kSize};
  d.triggerWord = "ohwx";
  c.datasets = {d};
  c.sample.prompts = {"a photo of [trigger]"};
  c.sample.sampleEvery = kSteps;
  c.sample.sampleSteps = 8;
  c.sample.width = kSize;
  c.sample.height = kSize;
  c.save.saveEvery = 0;
  return c;
}

void writeImages(const fs::path& dir) {
  fs::create_directories(dir);
  for (int i = 0; i < kImages; ++i) {
    at::Tensor img = test::gradient(kSize, kSize, 8.0 * i).clone();
    img.slice(0, 30 * i % 600, 30 * i % 600 + 300).slice(1, 17 * i % 500, 17 * i % 500 + 400).fill_(220);
    const std::string stem = "img_" + std::to_string(i);
    std::ofstream(dir / (stem + ".jpg"), std::ios::binary) << test::encodeJpeg(img);
    std::ofstream(dir / (stem + ".txt")) << "a [trigger] picture number " << i << " with a bright block";
  }
}

}  // namespace

TEST(ImagesGpu, FluxDevShapesCacheTrainAndSampleAt1024UnderA40GbCap) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  writeImages(tmp / "images");
  const auto cfg = devConfig(tmp / "images", tmp.path());

  // The encoders alone (random FLUX.1-dev VAE, T5-XXL, CLIP-L in the run's dtypes): images/s and peak memory.
  {
    const auto fc = families::planFluxConfig(cfg.model);
    DatasetContext ctx;
    ctx.latentChannels = fc.latentChannels();
    ctx.textDim = fc.jointAttentionDim;
    ctx.pooledDim = fc.pooledProjectionDim;
    ctx.textTokens = defaultTextTokens(ctx.textDim);
    releaseDeviceCaches();
    gpu::resetPeak();
    auto models = families::makeFluxImageModels(cfg, ctx, at::Device(at::kCUDA, 0));
    const auto pixels = at::rand({4, 3, kSize, kSize}).mul(2).sub(1);  // [4, 3, 1024, 1024]
    (void)models->encodeImages(pixels);                                // warm-up
    gpu::synchronize();
    gpu::resetPeak();
    auto t0 = std::chrono::steady_clock::now();
    constexpr int kRounds = 3;
    for (int r = 0; r < kRounds; ++r) (void)models->encodeImages(pixels);
    gpu::synchronize();
    const double vaeRate = 4.0 * kRounds / seconds(t0);
    const int64_t vaePeak = gpu::peakAllocatedBytes();
    std::vector<std::string> captions;
    for (int i = 0; i < 4; ++i) captions.push_back("a ohwx picture number " + std::to_string(i));
    (void)models->encodeTexts(captions);  // loads T5 and CLIP, warm-up
    gpu::synchronize();
    gpu::resetPeak();
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kRounds; ++r) (void)models->encodeTexts(captions);
    gpu::synchronize();
    const double textRate = 4.0 * kRounds / seconds(t0);
    const int64_t textPeak = gpu::peakAllocatedBytes();
    std::printf("[images gpu] VAE encode 1024 px (bf16, batch 4): %.2f images/s, peak allocated %.2f GiB\n", vaeRate,
                gpu::gib(vaePeak));
    std::printf(
        "[images gpu] T5-XXL + CLIP-L encode (bf16, %lld tokens, batch 4): %.2f captions/s, peak allocated "
        "%.2f GiB (VAE resident)\n",
        static_cast<long long>(ctx.textTokens), textRate, gpu::gib(textPeak));
  }
  releaseDeviceCaches();

  // The run: caching, 30 steps, samples at 0 and 30.
  events::EventBus bus;
  std::vector<double> stepMs;
  int64_t cachePeak = 0, trainPeak = 0, samplePeak0 = 0, samplePeak30 = 0;
  double cacheLatentsRate = 0, cacheTextRate = 0;
  int64_t latentsEncoded = 0;
  std::string failure;
  auto t0 = std::chrono::steady_clock::now();
  double cacheSeconds = 0;
  bool caching = false;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (const auto* p = std::get_if<events::CacheProgressEvent>(&e)) {
      if (!caching) {
        caching = true;
        gpu::resetPeak();
        t0 = std::chrono::steady_clock::now();
      }
      if (p->done == p->total && p->stage == "latents") {
        cacheLatentsRate = p->itemsPerSecond;
        latentsEncoded = p->encoded;
      }
      if (p->done == p->total && p->stage == "text") cacheTextRate = p->itemsPerSecond;
      if (p->done == p->total && p->stage == "sample prompts") {
        cachePeak = gpu::peakAllocatedBytes();
        cacheSeconds = seconds(t0);
      }
    } else if (std::get_if<events::StartedEvent>(&e)) {
      gpu::resetPeak();
    } else if (const auto* s = std::get_if<events::SampleEvent>(&e)) {
      (s->step == 0 ? samplePeak0 : samplePeak30) = gpu::peakAllocatedBytes();
      gpu::resetPeak();
    } else if (const auto* s = std::get_if<events::StepEvent>(&e)) {
      if (s->step > 1) stepMs.push_back(s->stepTimeMs);  // step 1 warms up
      if (s->step == kSteps) trainPeak = gpu::peakAllocatedBytes();
    } else if (const auto* f = std::get_if<events::FailedEvent>(&e)) {
      failure = f->message;
    } else if (const auto* f = std::get_if<events::PreflightFailedEvent>(&e)) {
      for (const auto& p : f->problems) failure += p + "\n";
    }
  });
  Trainer t(cfg, bus);
  ASSERT_EQ(t.run(), RunOutcome::Finished) << failure;
  EXPECT_EQ(latentsEncoded, kImages);
  std::printf(
      "[images gpu] caching %d images of %lld px: %.1f s; latents %.2f images/s, text %.2f captions/s "
      "(loading and file I/O included); peak allocated %.2f GiB\n",
      kImages, static_cast<long long>(kSize), cacheSeconds, cacheLatentsRate, cacheTextRate, gpu::gib(cachePeak));
  std::printf(
      "[images gpu] training %d steps at %lld px, checkpointing, cap 40 GB: step median %.3f s; peak "
      "allocated %.2f GiB\n",
      kSteps, static_cast<long long>(kSize), gpu::medianMs(stepMs) / 1000.0, gpu::gib(trainPeak));
  std::printf("[images gpu] sampling (8 steps, VAE decode): peak allocated %.2f GiB at step 0, %.2f GiB at step %d\n",
              gpu::gib(samplePeak0), gpu::gib(samplePeak30), kSteps);
  EXPECT_LT(gpu::gib(std::max({cachePeak, trainPeak, samplePeak0, samplePeak30})), 40.0 * 1e9 / (1 << 30));
  for (int step : {0, kSteps}) {
    char name[64];
    std::snprintf(name, sizeof name, "step_%08d_p00.png", step);
    const auto img = io::readImage(t.runDir() / "samples" / name, io::ImageChannels::Rgb);
    EXPECT_EQ(img.pixels.sizes().vec(), (std::vector<int64_t>{kSize, kSize, 3})) << name;
    EXPECT_EQ(img.text.at("prompt"), "a photo of ohwx");
  }
}
