#include "families/flux/FluxRun.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "diffusion/DiffusionPlanning.h"
#include "diffusion/TrainBatch.h"
#include "families/flux/FluxImageModels.h"
#include "families/flux/FluxPlanning.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxSampling.h"
#include "nn/Quantize.h"
#include "placement/QuantScaleAttachment.h"
#include "train/FlowMatching.h"
#include "train/HostToDevice.h"
#include "train/PhaseTimer.h"
#include "train/RngState.h"
#include "train/TrainerSupport.h"

namespace strata::families {

void FluxRun::prepareData(train::RunContext& run) {
  const config::RunConfig& cfg = run.config();
  events::EventBus& bus = run.bus();
  config_ = planFluxConfig(cfg.model);  // the shape prepareRun planned with
  train::DatasetContext ctx;
  ctx.latentChannels = config_.latentChannels();
  ctx.textTokens = train::defaultTextTokens(config_.jointAttentionDim);
  ctx.textDim = config_.jointAttentionDim;
  ctx.pooledDim = config_.pooledProjectionDim;
  ctx.seed = cfg.train.seed;
  ctx.pinReadAhead = train::firstDevice(run.prepared()).is_cuda();  // the model's card
  promptEmbedder_ = std::make_unique<train::WordEmbedder>(ctx.textTokens, ctx.textDim, ctx.pooledDim);
  // An images run: the VAE and text encoders fill the caches on the first device (diffusion/ImagesRun.h).
  if (diffusion::hasImagesDataset(cfg)) {
    train::prepareDevices(cfg, run.prepared());
    ctx.bus = &bus;                           // T5's load progress, then the datasets' summaries and cache progress
    ctx.stopRequested = run.stopRequested();  // polled between cache batches
    images_ = std::make_unique<diffusion::ImagesRun>(makeFluxImageModels(cfg, ctx, train::firstDevice(run.prepared())),
                                                     cfg, ctx, bus);
    ctx.encoders = &images_->encoders();
    run.stopPoint("loading the VAE and text encoders");
  }
  dataset_ = train::makeDatasets(cfg.datasets, ctx);
  emptyPrompt_ = dataset_->emptyPrompt();
  pixelCode_ = cfg.datasets.front().type == config::DatasetType::Shapes;
  if (images_) {
    run.stopPoint("caching (the image cache is complete and kept)");
    images_->finishCaching();  // sample prompts encoded once; T5 and CLIP freed before step 1
    train::releaseDeviceCaches();
  }
}

train::PlacedModel FluxRun::buildAndPlace(train::RunContext& run) {
  const config::RunConfig& cfg = run.config();
  events::EventBus& bus = run.bus();
  const auto& m = cfg.model;
  const train::DeviceSetup dev = train::setUpDevices(cfg, run.prepared());
  at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // the same random base on resume
  flux::FluxBuildOptions bo;
  bo.device = dev.buildDevice;
  bo.dtype = train::scalarTypeOf(cfg.train.dtype);
  const bool loadWeights = !m.nameOrPath.empty() && !m.randomWeights;
  const auto qtype = m.quantize ? nn::quantTypeFromName(m.qtype) : nn::QuantType::None;
  // model.fp8_matmul (the validator allows it only with an fp8 qtype on a card that has it).
  const bool fp8Matmul = m.fp8Matmul && nn::isFloat8(qtype);
  if (loadWeights) {
    // Each block is read from the file (and quantized) on its plan device before the
    // next one exists (flux::streamFluxTransformer).
    bo.blockDevice = train::planBlockDevice(dev);
    flux::FluxStreamOptions so;
    so.quantize = qtype;
    // A checkpoint of FLUX.1-dev's size takes a while to stream in: say how far it is.
    so.onProgress = [&bus, &run](int64_t done, int64_t total) {
      bus.publish(events::LoadProgressEvent{events::kLoadTransformer, done, total});
      run.stopPoint("loading the transformer (" + std::to_string(done) + " of " + std::to_string(total) + ")");
    };
    model_ = flux::streamFluxTransformer(flux::FluxCheckpoint::open(m.nameOrPath), config_, bo, so);
  } else {
    // Random weights: each block quantized and on its plan device as soon as it exists.
    size_t built = 0;
    if (auto hook = train::randomBlockHook(qtype, dev))
      bo.onBlockBuilt = [hook, &built](torch::nn::Module& block) { hook(built++, block); };
    model_ = std::make_shared<flux::FluxTransformer>(config_, bo);
  }
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
  rules_ = std::make_unique<flux::FluxLoraRules>(config_);
  return placed;
}

namespace {

// Where microBatch puts each tensor, and microLoss reads it.
enum MicroBatchSlot : size_t { kImg, kTxt, kPooled, kTimestep, kGuidance, kImgIds, kTxtIds, kTarget, kSlots };

}  // namespace

std::vector<at::Tensor> FluxRun::microBatch(train::RunContext& run, int64_t batch, int64_t step) {
  const config::RunConfig& cfg = run.config();
  // The draw, caption dropout, noise and timesteps: as every flow-matching image family's.
  const auto drawn = diffusion::drawBatch(run, *dataset_, emptyPrompt_, batch, {}, step);
  const int64_t tokens = drawn.text.size(1);
  const auto dev = run.placement().stemDevice();
  // Queued copies (toDeviceAsync), then the noise and packing on the card: the CPU goes
  // on to launch the forward.
  const auto latents = train::toDeviceAsync(drawn.latents, dev);  // [B, C, H, W]
  const int64_t h = latents.size(2), w = latents.size(3);
  const auto noised = diffusion::noiseBatch(run, latents, flux::shiftMu((h / 2) * (w / 2)));
  const auto& sigmas = noised.sigmas;

  std::vector<at::Tensor> out(kSlots);
  out[kImg] = flux::packLatents(noised.noisy);  // [B, HW/4, 4C]
  out[kTxt] = train::toDeviceAsync(drawn.text, dev);
  out[kPooled] = train::toDeviceAsync(drawn.pooled, dev);
  out[kTimestep] = train::toDeviceAsync(sigmas, dev);
  out[kGuidance] = train::toDeviceAsync(at::full({batch}, cfg.train.guidance, at::kFloat), dev);
  out[kImgIds] = train::toDeviceAsync(flux::imageIds(h, w), dev);
  out[kTxtIds] = train::toDeviceAsync(flux::textIds(tokens), dev);
  out[kTarget] = flux::packLatents(noised.target).to(run.placement().headDevice());
  if (run.phases()) run.phases()->mark("data");
  return out;
}

at::Tensor FluxRun::microLoss(train::RunContext& run, const std::vector<at::Tensor>& batch) {
  flux::FluxInputs in;
  in.img = batch.at(kImg);
  in.txt = batch.at(kTxt);
  in.pooled = batch.at(kPooled);
  in.timestep = batch.at(kTimestep);
  in.guidance = batch.at(kGuidance);
  in.imgIds = batch.at(kImgIds);
  in.txtIds = batch.at(kTxtIds);
  RECORD_USER_SCOPE("strata::forward");                 // for bench --profile traces: data is the time before it
  auto prediction = model_->forward(in, run.runner());  // [B, HW/4, 4C]
  return train::flowMatchingLoss(prediction, batch.at(kTarget));
}

std::string FluxRun::microBatchShapeChange() const { return diffusion::itemShapeChange(*dataset_); }

train::Sample FluxRun::sample(train::RunContext& run, int64_t step, size_t promptIndex) {
  (void)step;
  const config::RunConfig& cfg = run.config();
  // Latent pixels per image pixel: the images run's VAE, the demo's pixel code, else the VAE's 8 (previews).
  const int64_t scale = images_ ? images_->downscaleFactor() : pixelCode_ ? train::kPixelCodeScale : 8;
  auto even = [](int64_t v) { return std::max<int64_t>(2, v - v % 2); };
  const int64_t h = even(cfg.sample.height / scale), w = even(cfg.sample.width / scale);
  const auto dev = run.placement().stemDevice();
  const size_t i = promptIndex;
  train::Sample out;
  // An images run samples the prompt with its trigger word, from the real text encoders' embedding.
  out.prompt = images_ ? images_->promptText(i) : cfg.sample.prompts[i];
  out.seed = cfg.sample.seed + (cfg.sample.walkSeed ? static_cast<int64_t>(i) : 0);
  auto g = train::makeCpuGenerator(static_cast<uint64_t>(out.seed));
  auto noise = at::randn({1, config_.latentChannels(), h, w}, g, at::kFloat);  // [1, C, h, w]
  const auto e = images_              ? images_->promptEmbedding(i)
                 : out.prompt.empty() ? emptyPrompt_
                                      : promptEmbedder_->embed(out.prompt);
  auto latents = flux::sample(*model_, noise.to(dev), e.txt.unsqueeze(0).to(dev), e.pooled.unsqueeze(0).to(dev),
                              cfg.sample.guidanceScale, cfg.sample.sampleSteps, &run.placement());
  // [3, h scale, w scale]: decoded by the VAE, or the pixel code / its preview.
  out.image = images_ ? images_->decode(latents)[0] : train::latentsToRgb(latents[0].to(at::kCPU, at::kFloat));
  return out;
}

void FluxRun::exportLora(train::RunContext& run, config::ExportFormat format, const std::filesystem::path& path,
                         int64_t step, const std::string& runYaml, const std::string& softwareVersion) {
  const config::RunConfig& cfg = run.config();
  lora::writeLoraFile(path, run.network(), *rules_,
                      fluxExportOptions(cfg, format, step, cfg.network.linearAlpha, runYaml, softwareVersion));
}

void FluxRun::release() {
  images_.reset();
  model_.reset();
  rules_.reset();
  dataset_.reset();
}

lora::LoraExportOptions fluxExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                          double alpha, const std::string& runYaml,
                                          const std::string& softwareVersion) {
  return diffusion::loraExportOptions(
      cfg, format, steps, alpha, runYaml, softwareVersion,
      cfg.model.nameOrPath.empty() ? "random FLUX-architecture model (" +
                                         (cfg.model.preset.empty() ? std::string("flux-dev") : cfg.model.preset) + ")"
                                   : cfg.model.nameOrPath);
}

}  // namespace strata::families
