// FLUX.2's text encoder split by layers over devices while the cache is built
// (docs/flux2.md, "Splitting over GPUs"): the plan sizes the encoder the run builds
// (its stem's, each layer's and its head's bytes are the built model's, quantized
// or not), a caching plan's split reaches the encoder (each layer built on its plan
// device, the layers run through a placement over them) and the hidden states are
// the unsplit encoder's. On the CPU every device of the split is the cpu; the split
// over two cards is tests/gpu/test_flux2_text_gpu.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "config/RunConfig.h"
#include "families/flux2/Flux2Family.h"
#include "families/flux2/Flux2ImageModels.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "models/llama/LlamaForCausalLM.h"
#include "placement/Placement.h"
#include "placement/Planner.h"
#include "train/Datasets.h"

using namespace strata;
using namespace strata::families;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kPrompts = {"a photo of sks person", "", "a red block on a gradient, soft light"};

fs::path pipelineDir(const std::string& variant) {
  return test::sourceDir() / "tests" / "fixtures" / "reference" / ("flux2_pipeline_" + variant + "_a") / "model";
}

// An images run on the fixture's diffusers folder, on the CPU.
config::RunConfig imagesRun(const fs::path& model, bool quantizeTe) {
  config::RunConfig c;
  c.model.arch = "flux2";
  c.model.nameOrPath = model.string();
  c.model.device = config::ComputeDevice::Cpu;
  c.model.quantizeTe = quantizeTe;
  c.model.qtype = "int8";
  c.train.dtype = config::DType::FP32;
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = "unused";
  d.resolution = {32};
  c.datasets = {d};
  return c;
}

Flux2TextEncoderOptions cpuOptions(bool quantize) {
  Flux2TextEncoderOptions o;
  o.device = at::kCPU;
  o.dtype = at::kFloat;  // what an images run uses on the CPU
  if (quantize) o.quantize = nn::QuantType::Int8;
  return o;
}

// Bytes of the parameters of `modules`, and of the quantization scales of their Linears.
int64_t bytesOf(const std::vector<nn::NamedModule>& modules) {
  int64_t bytes = 0;
  for (const auto& nm : modules) {
    for (const auto& p : nm.module->parameters()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
    for (const auto& m : nm.module->modules())
      if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(m); lin && lin->weightScale.defined())
        bytes += lin->weightScale.numel() * static_cast<int64_t>(lin->weightScale.element_size());
  }
  return bytes;
}

std::vector<at::Device> cpuLayers(size_t n) { return std::vector<at::Device>(n, at::Device(at::kCPU)); }

}  // namespace

// What the plan splits is the model the run builds: per unit the same bytes, int8 or not.
TEST(Flux2TextSplit, ThePlannedPartsAreTheBuiltModelsBytes) {
  for (const std::string variant : {"dev", "klein"}) {
    const fs::path model = pipelineDir(variant);
    if (!fs::exists(model / "model_index.json")) GTEST_SKIP() << "no " << variant << " fixture";
    for (const bool quantize : {false, true}) {
      SCOPED_TRACE(variant + (quantize ? " int8" : " fp32"));
      std::string note;
      const auto modules = flux2OtherModules(imagesRun(model, quantize), "cpu", &note);
      ASSERT_EQ(modules.size(), 2u) << note;
      const placement::OtherModule& te = modules[0];
      EXPECT_EQ(te.name, kFlux2TextEncoderModule);
      ASSERT_TRUE(te.splittable());
      const auto enc =
          Flux2PromptEncoder::load(Flux2TextEncoderFiles::fromDiffusersFolder(model), cpuOptions(quantize));
      auto blocks = enc->model()->blockList();
      ASSERT_EQ(te.layerBytes.size(), blocks.blocks.size()) << "the plan's layers are the ones the encoder reads";
      EXPECT_EQ(te.stemBytes, bytesOf(blocks.stem.modules));
      EXPECT_EQ(te.headBytes, bytesOf(blocks.head.modules));
      int64_t total = te.stemBytes + te.headBytes;
      for (size_t i = 0; i < blocks.blocks.size(); ++i) {
        EXPECT_EQ(te.layerBytes[i], bytesOf(blocks.blocks[i].modules)) << blocks.blocks[i].id;
        total += te.layerBytes[i];
      }
      EXPECT_EQ(te.weightBytes, total);
      EXPECT_GT(te.cachingPeakBytes, 0);
    }
  }
}

// The layers built on their devices and run through a placement give the one-device numbers.
TEST(Flux2TextSplit, SplitLayersGiveTheOneDeviceHiddenStates) {
  for (const std::string variant : {"dev", "klein"}) {
    const fs::path model = pipelineDir(variant);
    if (!fs::exists(model / "model_index.json")) GTEST_SKIP() << "no " << variant << " fixture";
    const auto files = Flux2TextEncoderFiles::fromDiffusersFolder(model);
    for (const bool quantize : {false, true}) {
      SCOPED_TRACE(variant + (quantize ? " int8" : " fp32"));
      const auto whole = Flux2PromptEncoder::load(files, cpuOptions(quantize));
      EXPECT_EQ(whole->placement(), nullptr);
      const size_t layers = whole->model()->layerCount();
      Flux2TextEncoderOptions o = cpuOptions(quantize);
      o.layerDevices = cpuLayers(layers);
      o.headDevice = at::kCPU;
      const auto split = Flux2PromptEncoder::load(files, o);
      ASSERT_NE(split->placement(), nullptr);
      EXPECT_EQ(split->placement()->blockCount(), layers);
      EXPECT_TRUE(split->placement()->audit().empty());
      const auto a = whole->encodeDetailed(kPrompts);
      const auto b = split->encodeDetailed(kPrompts);
      ASSERT_EQ(a.hiddenStates.size(), b.hiddenStates.size());
      for (size_t i = 0; i < a.hiddenStates.size(); ++i)
        EXPECT_TRUE(at::equal(a.hiddenStates[i], b.hiddenStates[i])) << "hidden state " << whole->outLayers()[i];
      EXPECT_TRUE(at::equal(a.embeds, b.embeds));
      EXPECT_EQ(b.embeds.device(), o.device);
      split->release();
      EXPECT_TRUE(split->released());
      EXPECT_EQ(split->placement(), nullptr);
      // A plan for another number of layers is refused before anything is read.
      o.layerDevices = cpuLayers(layers + 1);
      EXPECT_THROW(Flux2PromptEncoder::load(files, o), PlacementError);
    }
  }
}

// Random weights: the same values split or not (each layer drawn on the build device, then moved).
TEST(Flux2TextSplit, ARandomEncoderIsTheSameSplitOrNot) {
  const fs::path tokenizer = pipelineDir("klein") / "tokenizer";
  if (!fs::exists(tokenizer / "tokenizer.json")) GTEST_SKIP() << "no klein fixture";
  const auto lc = flux2RandomTextConfig(Flux2TextEncoderKind::kQwen3, 96);
  Flux2TextEncoderOptions o = cpuOptions(true);
  o.maxSequenceLength = 64;
  o.outLayers = {1, 2, 3};
  at::manual_seed(5);
  const auto whole = Flux2PromptEncoder::random(tokenizer, Flux2TextEncoderKind::kQwen3, lc, o);
  o.layerDevices = cpuLayers(3);
  at::manual_seed(5);
  const auto split = Flux2PromptEncoder::random(tokenizer, Flux2TextEncoderKind::kQwen3, lc, o);
  ASSERT_NE(split->placement(), nullptr);
  EXPECT_TRUE(at::equal(whole->encode(kPrompts), split->encode(kPrompts)));
}

// The run's caching plan reaches the encoder: a plan that splits the text encoder over
// four cards gives each layer its card; the same split on cpu devices encodes as the
// unsplit run does, and a plan for another encoder is refused.
TEST(Flux2TextSplit, TheRunsCachingPlanReachesTheTextEncoder) {
  const fs::path model = pipelineDir("dev");
  if (!fs::exists(model / "model_index.json")) GTEST_SKIP() << "no dev fixture";
  const config::RunConfig cfg = imagesRun(model, false);
  placement::PlannerInput in;
  in.mode = placement::PlanMode::Memory;
  in.otherModules = flux2OtherModules(cfg, "cpu", nullptr);
  ASSERT_EQ(in.otherModules.size(), 2u);
  const auto& te = in.otherModules[0];
  const auto& vae = in.otherModules[1];
  // Four cards, each with room for the VAE, the encoder's stem and one layer's peak beside
  // half of its layers: one card is not enough, two would be.
  const int64_t layersBytes = te.weightBytes - te.stemBytes;
  const int64_t budget = std::max(vae.weightBytes + vae.cachingPeakBytes,
                                  vae.weightBytes + te.stemBytes + te.cachingPeakBytes + layersBytes / 2);
  ASSERT_GT(vae.weightBytes + te.weightBytes + te.cachingPeakBytes, budget) << "the case must not fit one card";
  for (int d = 0; d < 4; ++d) in.devices.push_back({"cuda:" + std::to_string(d), "simulated", budget});
  const placement::Plan plan = placement::planPlacement(in);
  ASSERT_EQ(plan.caching.splitModule, kFlux2TextEncoderModule) << plan.reason;
  ASSERT_TRUE(plan.caching.fits) << plan.reason;
  const size_t layers = te.layerBytes.size();
  const auto devices = placement::cachingLayerDevices(plan.caching, kFlux2TextEncoderModule, layers);
  ASSERT_TRUE(devices.split());
  EXPECT_EQ(devices.stem, at::Device("cuda:0"));
  ASSERT_EQ(devices.layers.size(), layers);
  for (size_t i = 0; i < layers; ++i) EXPECT_EQ(devices.layers[i].str(), plan.caching.deviceOfLayer(i));
  EXPECT_EQ(devices.head.str(), plan.caching.splitHeadDevice);
  EXPECT_NE(devices.layers.front(), devices.layers.back()) << "the layers are on more than one card";
  EXPECT_THROW(placement::cachingLayerDevices(plan.caching, kFlux2TextEncoderModule, layers + 1), PlacementError);
  // Another module's name, or a plan that keeps it whole: no split.
  EXPECT_FALSE(placement::cachingLayerDevices(plan.caching, "VAE", layers).split());

  // The same split with every device the cpu, through the images run's models.
  placement::CachingPlan onCpu = plan.caching;
  onCpu.device = onCpu.splitStemDevice = onCpu.splitHeadDevice = "cpu";
  for (auto& d : onCpu.layerDevice) d = "cpu";
  const auto fc = planFlux2Config(cfg.model);
  train::DatasetContext ctx;
  ctx.latentChannels = fc.latentChannels();
  ctx.textTokens = flux2TextTokens(cfg, fc);
  ctx.textDim = fc.jointAttentionDim;
  ctx.pooledDim = 0;
  auto whole = makeFlux2ImageModels(cfg, ctx, at::kCPU);
  auto split = makeFlux2ImageModels(cfg, ctx, at::kCPU, &onCpu);
  const auto a = whole->textEncoder().encode(kPrompts).tokens;
  const auto b = split->textEncoder().encode(kPrompts).tokens;
  ASSERT_EQ(a.size(1), ctx.textTokens);
  EXPECT_TRUE(at::equal(a, b));
  split->releaseTextEncoders();
  EXPECT_FALSE(split->textEncodersLoaded());
  onCpu.layerDevice.pop_back();
  EXPECT_THROW(makeFlux2ImageModels(cfg, ctx, at::kCPU, &onCpu), PlacementError);
}
