// model.arch: flux2 through the one Trainer on the CPU: the tiny FLUX.2 preset
// trains a LoRA on synthetic latents and text embeddings (the loss on fixed
// items falls), writes checkpoints, resumes where a straight run ends, and its
// exported LoRA files load back through Flux2LoraRules in every form, equal.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>

#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "config/FamilyRegistry.h"
#include "events/EventBus.h"
#include "families/flux2/Flux2Family.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "train/Datasets.h"
#include "train/FlowMatching.h"
#include "train/ModelFamily.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

config::RunConfig tinyConfig(const fs::path& folder, int64_t steps) {
  auto c = test::tinyCpuRun("flux2", folder, steps);
  c.model.arch = std::string("flux2");
  c.train.batchSize = 2;
  c.train.guidance = 4.0;
  c.train.captionDropoutRate = 0.1;
  c.train.seed = 7;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {64};  // 8x8 latents -> 4x4 patches: 16 image tokens
  d.numItems = 4;
  c.datasets = {d};
  c.save.saveEvery = 5;
  c.save.exportFormats = {config::ExportFormat::Diffusers, config::ExportFormat::Kohya, config::ExportFormat::Comfy};
  return c;
}

// The run's random base, rebuilt as the family builds it (seeded by train.seed).
std::shared_ptr<flux2::Flux2Transformer> baseModel(const config::RunConfig& cfg) {
  at::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  flux2::Flux2BuildOptions bo;
  bo.dtype = at::kFloat;
  auto m = std::make_shared<flux2::Flux2Transformer>(families::planFlux2Config(cfg.model), bo);
  for (auto& p : m->parameters()) p.requires_grad_(false);
  return m;
}

// The flow-matching loss over every item of the run's dataset at fixed sigmas and noise.
double fixedLoss(flux2::Flux2Transformer& model, const config::RunConfig& cfg) {
  at::NoGradGuard noGrad;
  const auto fc = model.config();
  DatasetContext ctx;
  ctx.latentChannels = fc.latentChannels();
  ctx.textTokens = families::flux2TextTokens(cfg, fc);
  ctx.textDim = fc.jointAttentionDim;
  ctx.pooledDim = 0;
  ctx.seed = cfg.train.seed;
  const auto data = makeDatasets(cfg.datasets, ctx);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  double total = 0;
  int n = 0;
  for (size_t i = 0; i < data->size(); ++i)
    for (double sigma : {0.25, 0.5, 0.75}) {
      const auto it = data->item(i);
      const auto x0 = flux2::patchifyLatents(it.latents.unsqueeze(0));  // [1, 4C, h, w]
      const auto noise = at::randn(x0.sizes(), gen, at::kFloat);
      const auto noised = addNoise(x0, noise, at::full({1}, sigma));
      flux2::Flux2Inputs in;
      in.img = flux2::packLatents(noised.noisy);
      in.txt = it.txt.unsqueeze(0);
      in.timestep = at::full({1}, sigma);
      in.guidance = at::full({1}, cfg.train.guidance);
      in.imgIds = flux2::latentIds(x0.size(2), x0.size(3));
      in.txtIds = flux2::textIds(it.txt.size(0));
      total += flowMatchingLoss(model.forward(in), flux2::packLatents(noised.target)).item<double>();
      ++n;
    }
  return total / n;
}

at::Tensor fixedOutput(flux2::Flux2Transformer& model, const config::RunConfig& cfg) {
  at::NoGradGuard noGrad;
  const auto fc = model.config();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(99);
  flux2::Flux2Inputs in;
  in.img = at::randn({1, 16, fc.inChannels}, gen, at::kFloat);
  in.txt = at::randn({1, 16, fc.jointAttentionDim}, gen, at::kFloat);
  in.timestep = at::full({1}, 0.5);
  in.guidance = at::full({1}, cfg.train.guidance);
  in.imgIds = flux2::latentIds(4, 4);
  in.txtIds = flux2::textIds(16);
  return model.forward(in);  // [1, 16, out_channels]
}

}  // namespace

TEST(Flux2Train, TheFamilyIsRegistered) {
  ASSERT_TRUE(hasModelFamily(std::string("flux2")));
  EXPECT_EQ(modelFamily(std::string("flux2")).displayName(), "FLUX.2");
  ASSERT_NE(config::findFamily("flux2"), nullptr);  // what it says about itself, under model.arch's spelling
  EXPECT_EQ(config::findFamily("flux2")->displayName, "FLUX.2");
}

TEST(Flux2Train, TinyLoraLowersTheLossAndItsFilesLoadBackInEveryForm) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 60);
  // The blocks' Linears and the stem's and head's (adapters the stem and head own):
  // on random latents the learnable part is mostly the map from x_t to the target.
  cfg.network.targetModules = {"re:(transformer_blocks|single_transformer_blocks)\\.[0-9]+\\..+", "x_embedder",
                               "context_embedder", "proj_out"};
  cfg.train.lr = 1e-2;
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.failures();

  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(steps.size(), 60u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 10; ++i) first += steps[i].loss, last += steps[50 + i].loss;
  EXPECT_LT(last, first) << "the training loss of the last 10 steps against the first 10";
  const auto ckpt = RunFolder(o.runDir).latestCheckpoint();
  ASSERT_TRUE(ckpt);
  EXPECT_EQ(ckpt->step, 60);

  // One file per form; each loads back through Flux2LoraRules onto the base, and all three give one model.
  const auto exports = rec.of<events::ExportEvent>();
  ASSERT_EQ(exports.size(), 3u);
  const auto fc = families::planFlux2Config(cfg.model);
  const flux2::Flux2LoraRules rules(fc);
  auto model = baseModel(cfg);
  const double baseLoss = fixedLoss(*model, cfg);
  const auto baseOut = fixedOutput(*model, cfg);
  std::map<std::string, at::Tensor> outs;
  std::map<std::string, double> losses;
  const auto live = io::loadSafetensors(ckpt->path / "lora.safetensors");
  for (const auto& e : exports) {
    const auto content = lora::readLoraFile(e.path, rules);
    EXPECT_EQ(2 * content.modules.size(), live.size()) << e.path;  // every adapter of the run
    if (e.format == "diffusers") {
      const auto tensors = io::loadSafetensors(e.path);
      EXPECT_TRUE(tensors.count("transformer.transformer_blocks.0.attn.to_q.lora_A.weight")) << e.path;
      EXPECT_TRUE(tensors.count("transformer.single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.weight"))
          << e.path;
    }
    auto network = lora::loadLoraNetwork(*model, rules, e.path);
    outs[e.format] = fixedOutput(*model, cfg);
    losses[e.format] = fixedLoss(*model, cfg);
    network->detach();
  }
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_GT((outs.at("diffusers") - baseOut).abs().max().item<double>(), 1e-4);  // the LoRA is applied
  EXPECT_TRUE(test::allClose(outs.at("kohya"), outs.at("diffusers"), 1e-5, 1e-5));
  EXPECT_TRUE(test::allClose(outs.at("comfy"), outs.at("diffusers"), 1e-5, 1e-5));
  std::cout << "[flux2 train] loss on the fixed items: base " << baseLoss << ", with the exported LoRA "
            << losses.at("diffusers") << "; step losses " << steps.front().loss << " -> " << steps.back().loss
            << std::endl;
  EXPECT_LT(losses.at("diffusers"), 0.9 * baseLoss);
}

TEST(Flux2Train, StopAndResumeEndWhereAStraightRunEnds) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 12);
  cfg.train.ema.useEma = true;
  cfg.train.ema.emaDecay = 0.9;
  cfg.save.saveEvery = 4;
  cfg.save.exportFormats = {config::ExportFormat::Diffusers};
  events::EventBus bus;
  TrainerOptions a;
  a.runDir = tmp / "straight";
  ASSERT_EQ(Trainer(cfg, bus, a).run(), RunOutcome::Finished);
  TrainerOptions b;
  b.runDir = tmp / "split";
  b.stopAfterStep = 6;
  ASSERT_EQ(Trainer(cfg, bus, b).run(), RunOutcome::Stopped);
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  ASSERT_EQ(Trainer::resumeFrom(tmp / "split", bus)->run(), RunOutcome::Finished) << rec.failures();
  RunFolder fa(a.runDir), fb(b.runDir);
  ASSERT_EQ(fa.latestCheckpoint()->step, 12);
  ASSERT_EQ(fb.latestCheckpoint()->step, 12);
  for (const char* file : {"lora.safetensors", "ema.safetensors"}) {
    const auto la = io::loadSafetensors(fa.latestCheckpoint()->path / file);
    const auto lb = io::loadSafetensors(fb.latestCheckpoint()->path / file);
    ASSERT_EQ(la.size(), lb.size()) << file;
    double moved = 0;
    for (const auto& [k, t] : la) {
      EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << file << " " << k;
      if (k.find("lora_B") != std::string::npos) moved += t.abs().sum().item<double>();
    }
    EXPECT_GT(moved, 0.0) << file;  // the LoRA did train
  }
  const auto ma = fa.readMetrics(), mb = fb.readMetrics();
  ASSERT_EQ(ma.size(), 12u);
  ASSERT_EQ(mb.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>(), 1e-5) << i;
  // strata-train export writes the same LoRA from the checkpoint, without a model.
  const auto written = exportRun(b.runDir, {config::ExportFormat::Diffusers}, {std::nullopt, tmp / "out"});
  ASSERT_EQ(written.size(), 1u);
  const auto content = lora::readLoraFile(written[0], flux2::Flux2LoraRules(families::planFlux2Config(cfg.model)));
  EXPECT_FALSE(content.modules.empty());
}

// With model.name_or_path the transformer streams in block by block through the shared
// DiT loader (LoadProgressEvent 1..blocks+1 of blocks+1, before the first step), and
// model.quantize quantizes its blocks as they arrive, as for FLUX.1: the run trains.
TEST(Flux2Train, LoadedWeightsStreamInQuantizedAndTrain) {
  test::TempDir tmp;
  auto cfg = tinyConfig(tmp.path(), 3);
  cfg.save.saveEvery = 0;
  const auto base = baseModel(cfg);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& p : base->named_parameters(true)) weights.emplace_back(p.key(), p.value().detach());
  io::writeSafetensors(tmp / "flux2-tiny.safetensors", weights);
  cfg.model.nameOrPath = (tmp / "flux2-tiny.safetensors").string();
  cfg.model.randomWeights = false;
  cfg.model.quantize = true;
  cfg.model.qtype = "int8";
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  TrainerOptions o;
  o.runDir = tmp / "run";
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.failures();

  const auto fc = families::planFlux2Config(cfg.model);
  const int64_t units = fc.numLayers + fc.numSingleLayers + 1;
  const auto loads = rec.of<events::LoadProgressEvent>();
  ASSERT_EQ(loads.size(), static_cast<size_t>(units));
  for (size_t i = 0; i < loads.size(); ++i) {
    EXPECT_EQ(loads[i].what, events::kLoadTransformer);
    EXPECT_EQ(loads[i].done, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(loads[i].total, units);
  }
  const auto steps = rec.of<events::StepEvent>();
  ASSERT_EQ(steps.size(), 3u);
  for (const auto& s : steps) EXPECT_TRUE(std::isfinite(s.loss)) << "step " << s.step;
}
