#include "families/flux2/Flux2Family.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "dit/ParamPlan.h"
#include "diffusion/DiffusionPlanning.h"
#include "diffusion/ImagesRun.h"
#include "diffusion/TrainBatch.h"
#include "families/flux2/Flux2ImageModels.h"
#include "lora/LoraFormats.h"
#include "lora/LoraTargets.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "nn/Quantize.h"
#include "placement/QuantScaleAttachment.h"
#include "placement/Planner.h"
#include "train/Datasets.h"
#include "train/FlowMatching.h"
#include "train/HostToDevice.h"
#include "train/PhaseTimer.h"
#include "train/RngState.h"
#include "train/TrainerSupport.h"

namespace strata::families {

namespace fs = std::filesystem;

namespace {

// The step count the training shift mu is fitted for (computeEmpiricalMu): the
// Flux2Pipeline's default num_inference_steps, so training sees the sampler's shift.
constexpr int64_t kMuSteps = 50;
// Text tokens per prompt of an images run: both pipelines' max_sequence_length.
constexpr int64_t kFlux2MaxSequenceLength = 512;

flux2::Flux2Config withShapeOverrides(flux2::Flux2Config c, const config::ModelConfig& m) {
  if (m.numLayers) c.numLayers = *m.numLayers;
  if (m.numSingleLayers) c.numSingleLayers = *m.numSingleLayers;
  if (m.numAttentionHeads) c.numAttentionHeads = *m.numAttentionHeads;
  if (m.attentionHeadDim) c.attentionHeadDim = *m.attentionHeadDim;
  if (m.inChannels) c.inChannels = c.outChannels = *m.inChannels;
  if (m.jointAttentionDim) c.jointAttentionDim = *m.jointAttentionDim;
  if (!m.axesDimsRope.empty()) c.axesDimsRope = m.axesDimsRope;
  if (m.guidanceEmbeds) c.guidanceEmbeds = *m.guidanceEmbeds;
  try {
    c.validate();
  } catch (const std::exception& e) {
    throw ConfigError(std::string("model: the FLUX.2 shape: ") + e.what());
  }
  return c;
}

int64_t largestResolution(const config::RunConfig& cfg) {
  int64_t px = 0;
  for (const auto& d : cfg.datasets)
    for (int64_t r : d.resolution) px = std::max(px, r);
  return px == 0 ? 512 : px;
}

}  // namespace

flux2::Flux2Config planFlux2Config(const config::ModelConfig& m, std::string* source) {
  const std::string presetName = m.preset.empty() ? "flux2-dev" : m.preset;  // the validator checked the name
  const flux2::Flux2Config preset = flux2::Flux2Config::preset(presetName);
  std::string from;
  flux2::Flux2Config c;
  std::error_code ec;
  if (!m.randomWeights && !m.nameOrPath.empty() && fs::exists(m.nameOrPath, ec)) {
    c = flux2::flux2ConfigFromCheckpoint(m.nameOrPath, preset);
    from = "shapes of " + m.nameOrPath + " (headers only)";
  } else {
    c = preset;
    from = "preset " + presetName;
    if (!m.randomWeights && !m.nameOrPath.empty()) from += " (" + m.nameOrPath + " not found here)";
  }
  if (source) *source = from;
  return withShapeOverrides(c, m);
}

int64_t flux2ImageTokens(const config::RunConfig& cfg) {
  const int64_t patches = largestResolution(cfg) / 16;  // 8x VAE, then 2x2 patchify
  return patches * patches;
}

int64_t flux2TextTokens(const config::RunConfig& cfg, const flux2::Flux2Config& fc) {
  return diffusion::hasImagesDataset(cfg) ? kFlux2MaxSequenceLength : train::defaultTextTokens(fc.jointAttentionDim);
}

double flux2TrainStepFlops(const config::RunConfig& cfg, const flux2::Flux2Config& fc) {
  const lora::LoraTargets targets(cfg.network.targetModules.empty() ? flux2::Flux2LoraRules(fc).defaultTargets()
                                                                    : cfg.network.targetModules);
  return flux2::flux2TrainStepFlops(fc, cfg.train.batchSize, flux2ImageTokens(cfg), flux2TextTokens(cfg, fc),
                                    cfg.network.linear, [&](const std::string& path) { return targets.matches(path); });
}

namespace {

lora::LoraExportOptions flux2ExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                           double alpha, const std::string& runYaml,
                                           const std::string& softwareVersion) {
  return diffusion::loraExportOptions(
      cfg, format, steps, alpha, runYaml, softwareVersion,
      cfg.model.nameOrPath.empty() || cfg.model.randomWeights
          ? "random FLUX.2-architecture model (" +
                (cfg.model.preset.empty() ? std::string("flux2-dev") : cfg.model.preset) + ")"
          : cfg.model.nameOrPath);
}

// Where Flux2Run::microBatch puts each tensor, and microLoss reads it.
enum MicroBatchSlot : size_t { kImg, kTxt, kTimestep, kGuidance, kImgIds, kTxtIds, kTarget, kSlots };

class Flux2Run : public train::FamilyRun {
 public:
  void prepareData(train::RunContext& run) override {
    const config::RunConfig& cfg = run.config();
    config_ = planFlux2Config(cfg.model);  // the shape prepareRun planned with
    for (size_t i = 0; i < cfg.datasets.size(); ++i)
      if (cfg.datasets[i].type != config::DatasetType::Synthetic &&
          cfg.datasets[i].type != config::DatasetType::Images)  // the validator refuses it first
        throw ConfigError("datasets[" + std::to_string(i) + "].type: a flux2 model trains on images or synthetic data");
    train::DatasetContext ctx;
    ctx.latentChannels = config_.latentChannels();   // before the 2x2 patchify
    ctx.textTokens = flux2TextTokens(cfg, config_);  // the plan's count: 512 for an images run
    ctx.textDim = config_.jointAttentionDim;
    ctx.pooledDim = 0;  // FLUX.2 has no pooled text embedding
    ctx.seed = cfg.train.seed;
    ctx.pinReadAhead = train::firstDevice(run.prepared()).is_cuda();  // the model's card
    // An images run: the VAE and the text encoder fill the caches on the first device (diffusion/ImagesRun.h).
    if (diffusion::hasImagesDataset(cfg)) {
      guidance_ = flux2::guidanceModeOf(config_, flux2RunDistilled(cfg.model));
      train::prepareDevices(cfg, run.prepared());
      ctx.bus = &run.bus();  // the text encoder's load progress, then the datasets' summaries and cache progress
      ctx.stopRequested = run.stopRequested();  // polled between cache batches
      // The text encoder where the run's plan puts it for caching: whole on the first
      // device, or its layers split over the run's cards.
      images_ = std::make_unique<diffusion::ImagesRun>(
          makeFlux2ImageModels(cfg, ctx, train::firstDevice(run.prepared()), &run.prepared().plan.caching), cfg, ctx,
          run.bus());
      ctx.encoders = &images_->encoders();
      run.stopPoint("loading the VAE and the text encoder");
    }
    textTokens_ = ctx.textTokens;
    dataset_ = train::makeDatasets(cfg.datasets, ctx);
    // An images dataset's: the empty caption through the text encoder, as the pipeline encodes "".
    emptyPrompt_ = dataset_->emptyPrompt();
    if (images_) {
      run.stopPoint("caching (the image cache is complete and kept)");
      images_->finishCaching();  // sample prompts encoded once; the text encoder freed before step 1
      train::releaseDeviceCaches();
    }
  }

  train::PlacedModel buildAndPlace(train::RunContext& run) override {
    const config::RunConfig& cfg = run.config();
    const auto& m = cfg.model;
    const train::DeviceSetup dev = train::setUpDevices(cfg, run.prepared());
    at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // the same random base on resume
    flux2::Flux2BuildOptions bo;
    bo.device = dev.buildDevice;
    bo.dtype = train::scalarTypeOf(cfg.train.dtype);
    const bool loadWeights = !m.nameOrPath.empty() && !m.randomWeights;
    const auto qtype = m.quantize ? nn::quantTypeFromName(m.qtype) : nn::QuantType::None;
    const bool fp8Matmul = m.fp8Matmul && nn::isFloat8(qtype);  // the validator allows it only with an fp8 qtype
    if (loadWeights) {
      // Each block is read from the file (and quantized) on its plan device before the
      // next one exists (flux2::streamFlux2Transformer).
      bo.blockDevice = train::planBlockDevice(dev);
      flux2::Flux2StreamOptions so;
      so.quantize = qtype;
      so.onProgress = [&run](int64_t done, int64_t total) {
        run.bus().publish(events::LoadProgressEvent{events::kLoadTransformer, done, total});
        run.stopPoint("loading the transformer (" + std::to_string(done) + " of " + std::to_string(total) + ")");
      };
      model_ = flux2::streamFlux2Transformer(flux2::openFlux2Checkpoint(m.nameOrPath), config_, bo, so);
    } else {
      // Random weights: each block quantized and on its plan device as soon as it exists.
      size_t built = 0;
      if (auto hook = train::randomBlockHook(qtype, dev))
        bo.onBlockBuilt = [hook, &built](torch::nn::Module& block) { hook(built++, block); };
      model_ = std::make_shared<flux2::Flux2Transformer>(config_, bo);
    }
    run.stopPoint("building the transformer");
    nn::Fp8MatmulCount fp8;
    if (fp8Matmul)
      for (auto& slot : model_->blockList().blocks)
        fp8 += nn::enableFp8Matmul(*slot.block, nn::fp8BackwardOf(m.fp8Backward, m.fp8KeepTranspose));
    for (auto& p : model_->parameters()) p.requires_grad_(false);
    train::PlacedModel placed = train::placeBlocks(model_->blockList(), dev);
    if (fp8Matmul) placed.reason += "; " + nn::fp8MatmulSummary(fp8);
    if (qtype != nn::QuantType::None) placed.placement->attachAll(placement::QuantScaleAttachment::forModel(*model_));
    placed.placement->apply();
    if (fp8Matmul) train::checkFp8MatmulRuns(model_->blockList(), bo.dtype);
    rules_ = std::make_unique<flux2::Flux2LoraRules>(config_);
    return placed;
  }

  torch::nn::Module& module() override { return *model_; }
  const nn::LoraNameRules& loraRules() const override { return *rules_; }

  // [img (noised, packed), txt, timestep, guidance, imgIds, txtIds, target (packed)]
  std::vector<at::Tensor> microBatch(train::RunContext& run, int64_t batch, int64_t step) override {
    const config::RunConfig& cfg = run.config();
    // The draw, caption dropout, noise and timesteps: as every flow-matching image family's
    // (FLUX.2 has no pooled vector); the noise in the patchified shape.
    const int64_t tokens = textTokens_;
    diffusion::DrawOptions draw;
    draw.tokens = tokens;
    draw.pooled = false;
    const auto drawn = diffusion::drawBatch(run, *dataset_, emptyPrompt_, batch, draw, step);
    const auto dev = run.placement().stemDevice();
    // Queued copies (toDeviceAsync), then the patchify, noise and packing on the card:
    // the CPU goes on to launch the forward.
    const auto latents = flux2::patchifyLatents(train::toDeviceAsync(drawn.latents, dev));  // [B, 4C, H/2, W/2]
    const int64_t h = latents.size(2), w = latents.size(3);
    const auto noised = diffusion::noiseBatch(run, latents, flux2::computeEmpiricalMu(h * w, kMuSteps));
    std::vector<at::Tensor> out(kSlots);
    out[kImg] = flux2::packLatents(noised.noisy);       // [B, hw, 4C]
    out[kTxt] = train::toDeviceAsync(drawn.text, dev);  // [B, N_txt, D]
    out[kTimestep] = train::toDeviceAsync(noised.sigmas, dev);
    out[kGuidance] = train::toDeviceAsync(at::full({batch}, cfg.train.guidance, at::kFloat), dev);
    out[kImgIds] = train::toDeviceAsync(flux2::latentIds(h, w), dev);
    out[kTxtIds] = train::toDeviceAsync(flux2::textIds(tokens), dev);
    out[kTarget] = flux2::packLatents(noised.target).to(run.placement().headDevice());
    if (run.phases()) run.phases()->mark("data");
    return out;
  }

  at::Tensor microLoss(train::RunContext& run, const std::vector<at::Tensor>& batch) override {
    flux2::Flux2Inputs in;
    in.img = batch.at(kImg);
    in.txt = batch.at(kTxt);
    in.timestep = batch.at(kTimestep);
    in.guidance = batch.at(kGuidance);
    in.imgIds = batch.at(kImgIds);
    in.txtIds = batch.at(kTxtIds);
    auto prediction = model_->forward(in, run.runner());  // [B, hw, 4C]
    return train::flowMatchingLoss(prediction, batch.at(kTarget));
  }
  std::string microBatchShapeChange() const override { return diffusion::itemShapeChange(*dataset_); }

  // An images run samples through its VAE with the model's guidance (the validator
  // refuses sampling on synthetic data; a config that got past it is told why).
  std::string samplesProblem() const override {
    return images_ ? "" : "a flux2 run samples only with an images dataset (synthetic data has no VAE to decode)";
  }
  train::Sample sample(train::RunContext& run, int64_t /*step*/, size_t promptIndex) override {
    if (!images_) throw Error(samplesProblem());
    const config::RunConfig& cfg = run.config();
    const size_t i = promptIndex;
    train::Sample out;
    out.prompt = images_->promptText(i);  // with the trigger word
    out.seed = cfg.sample.seed + (cfg.sample.walkSeed ? static_cast<int64_t>(i) : 0);
    // Training latents [1, C, h, w], h and w even: 2x2 patches, one token each.
    const int64_t f = images_->downscaleFactor();
    auto even = [](int64_t v) { return std::max<int64_t>(2, v - v % 2); };
    const int64_t h = even(cfg.sample.height / f), w = even(cfg.sample.width / f);
    auto g = train::makeCpuGenerator(static_cast<uint64_t>(out.seed));
    const auto noise = at::randn({1, config_.latentChannels(), h, w}, g, at::kFloat);
    const auto patches = flux2::patchifyLatents(noise);  // [1, 4C, h/2, w/2]
    const int64_t ph = patches.size(2), pw = patches.size(3);
    const auto dev = run.placement().stemDevice();
    const auto longs = at::TensorOptions().dtype(at::kLong).device(dev);
    const auto ids = flux2::latentIds(ph, pw, longs);                                        // [hw, 4]
    const auto txt = images_->promptEmbedding(i).txt.unsqueeze(0).to(dev, model_->dtype());  // [1, L, D]
    const auto txtIds = flux2::textIds(txt.size(1), longs).unsqueeze(0);                     // [1, L, 4]
    const auto sigmas = flux2::samplingSigmas(cfg.sample.sampleSteps, ph * pw);
    const double scale = cfg.sample.guidanceScale;
    at::Tensor packed;  // [1, hw, 4C]
    if (flux2::runsNegativePass(guidance_, scale)) {
      // [klein] base: true CFG against the empty prompt, as Flux2KleinPipeline's default.
      const auto neg = emptyPrompt_.txt.unsqueeze(0).to(dev, model_->dtype());
      const auto negIds = flux2::textIds(neg.size(1), longs).unsqueeze(0);
      packed = flux2::samplePackedTrueCfg(*model_, flux2::packLatents(patches).to(dev), ids, txt, txtIds, neg, negIds,
                                          scale, sigmas, &run.placement());
    } else {
      // dev: the scale through the guidance embedding; distilled [klein]: one pass, the scale unused.
      packed = flux2::samplePacked(*model_, flux2::packLatents(patches).to(dev), ids, txt, txtIds, scale, sigmas,
                                   &run.placement());
    }
    const auto latents = flux2::unpatchifyLatents(flux2::unpackLatentsWithIds(packed, ids));  // [1, C, h, w]
    out.image = images_->decode(latents)[0];                                                  // [3, h f, w f]
    return out;
  }

  void exportLora(train::RunContext& run, config::ExportFormat format, const fs::path& path, int64_t step,
                  const std::string& runYaml, const std::string& softwareVersion) override {
    const config::RunConfig& cfg = run.config();
    lora::writeLoraFile(path, run.network(), *rules_,
                        flux2ExportOptions(cfg, format, step, cfg.network.linearAlpha, runYaml, softwareVersion));
  }

  void release() override {
    images_.reset();
    model_.reset();
    rules_.reset();
    dataset_.reset();
  }

 private:
  flux2::Flux2Config config_;
  std::shared_ptr<train::Dataset> dataset_;
  train::TextEmbedding emptyPrompt_;              // caption dropout; the negative of true CFG
  int64_t textTokens_ = 0;                        // text rows per sample
  std::unique_ptr<diffusion::ImagesRun> images_;  // an images run: its encoders, sample prompts and decoder
  flux2::Flux2GuidanceMode guidance_ = flux2::Flux2GuidanceMode::Embedded;
  std::shared_ptr<flux2::Flux2Transformer> model_;
  std::unique_ptr<flux2::Flux2LoraRules> rules_;
};

class Flux2Family : public train::ModelFamily {
 public:
  std::string arch() const override { return "flux2"; }
  std::unique_ptr<train::FamilyRun> newRun() const override { return std::make_unique<Flux2Run>(); }

  train::FamilyPlan plan(const config::RunConfig& cfg) const override {
    train::FamilyPlan out;
    const auto fc = planFlux2Config(cfg.model, &out.source);
    out.tokens = flux2ImageTokens(cfg) + flux2TextTokens(cfg, fc);
    const auto params = flux2::flux2ParamPlan(fc);
    // FLUX.2's blocks are not on FLUX.1's fused paths: PyTorch's figure.
    out.input =
        diffusion::runPlanInput(cfg, params, fc.hiddenSize(), flux2::Flux2LoraRules(fc).defaultTargets(), out.tokens,
                                placement::CostOptions{}.activationElementsPerTokenPerHidden, dit::isModulationLinear);
    out.summary = "FLUX.2 " + out.source + ", " + std::to_string(fc.numLayers) + " double + " +
                  std::to_string(fc.numSingleLayers) + " single blocks, " +
                  placement::formatParams(params.totalParams()) + " parameters";
    return out;
  }
  std::string planKey(const config::RunConfig& cfg) const override {
    return cfg.model.randomWeights || cfg.model.nameOrPath.empty() ? "model" : "model.name_or_path";
  }
  std::vector<placement::OtherModule> otherModules(const config::RunConfig& cfg, const std::string& device,
                                                   std::string* note) const override {
    return flux2OtherModules(cfg, device, note);
  }
  double trainStepFlops(const config::RunConfig& cfg) const override {
    return flux2TrainStepFlops(cfg, planFlux2Config(cfg.model));
  }
  std::string checkpointPrefix() const override { return "transformer."; }
  config::RunConfig tinyRun(const std::filesystem::path& folder) const override {
    config::RunConfig c = train::tinyRunSettings("flux2", folder);
    c.model.preset = "tiny";
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.resolution = {64};  // 8x8 latents -> 4x4 patches: 16 image tokens
    d.numItems = 4;
    c.datasets = {d};
    c.save.exportFormats = {config::ExportFormat::Diffusers, config::ExportFormat::Kohya, config::ExportFormat::Comfy};
    return c;
  }
  std::vector<train::ConfigTemplate> templates() const override {
    return {
        {"flux2-klein-9b-my-images-16gb", "flux2-klein-9b-my-images-16gb.yaml",
         "FLUX.2 [klein] 9B on my images, one 16 GB GPU",
         "A LoRA of your own pictures on FLUX.2 [klein] base 9B. You pick the image folder and the model "
         "folder (diffusers layout). The transformer and, while the captions are encoded, the Qwen3-8B text "
         "encoder are held in 8 bits so the run fits a 16 GB card; a LoRA file every 250 steps.",
         "datasets[0].folder_path", true, "The folder of your images (each with a .txt caption of the same name)",
         "The FLUX.2 [klein] base 9B folder (diffusers layout, as downloaded; cancel to set it later)"},
        {"flux2-dev-my-images-4x16gb", "flux2-dev-my-images-4x16gb.yaml", "FLUX.2-dev from your images over 4 x 16 GB",
         "A LoRA of your own pictures on FLUX.2-dev, over four cards capped at 16 GB each. You pick the image "
         "folder and the model folder (diffusers layout). The transformer is held in 8 bits and its blocks "
         "shared out over the cards; while the captions are encoded, the 24 B Mistral text encoder is split "
         "over the same cards by layers, then freed. A LoRA file every 250 steps.",
         "datasets[0].folder_path", true, "The folder of your images (each with a .txt caption of the same name)",
         "The FLUX.2-dev folder (diffusers layout, as downloaded; cancel to set it later)"},
        {"flux2-dev-4x24gb", "flux2-dev-4x24gb.yaml", "FLUX.2-dev split over four 24 GB GPUs (synthetic data)",
         "The 32 B FLUX.2-dev transformer over four cards capped at 24 GB, on random latents and text "
         "embeddings of FLUX.2's shapes (no images or samples; an images dataset needs the VAE and text "
         "encoder too: docs/flux2.md). Starts from random weights: set the base model to train the real "
         "transformer.",
         "", true, ""}};
  }
  std::string formatProblem(config::ExportFormat format) const override {
    return format == config::ExportFormat::Peft
               ? "peft (an adapter folder) is the causal-LM form; a FLUX.2 LoRA is written as diffusers, kohya or comfy"
               : "";
  }

  void exportModules(const std::vector<lora::LoraModuleWeights>& modules, const config::RunConfig& cfg,
                     config::ExportFormat format, const fs::path& path, int64_t step,
                     const std::string& softwareVersion) const override {
    const double alpha = modules.empty() ? cfg.network.linearAlpha : modules.front().alpha;
    const flux2::Flux2LoraRules rules(planFlux2Config(cfg.model));
    lora::writeLoraFile(path, modules, rules, flux2ExportOptions(cfg, format, step, alpha, "", softwareVersion));
  }
};

}  // namespace

std::shared_ptr<const train::ModelFamily> makeFlux2Family() { return std::make_shared<Flux2Family>(); }

}  // namespace strata::families
