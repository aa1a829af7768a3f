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
#include "io/Image.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxSampling.h"
#include "nn/Quantize.h"
#include "placement/QuantScaleAttachment.h"
#include "train/FlowMatching.h"
#include "train/HostToDevice.h"
#include "train/PhaseTimer.h"
#include "train/RngState.h"
#include "train/SamplingWeights.h"
#include "train/TrainerSupport.h"

namespace strata::families {

void FluxRun::prepareData(train::Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus) {
  config_ = planFluxConfig(cfg.model);  // the shape prepareRun planned with
  train::DatasetContext ctx;
  ctx.latentChannels = config_.latentChannels();
  ctx.textTokens = train::defaultTextTokens(config_.jointAttentionDim);
  ctx.textDim = config_.jointAttentionDim;
  ctx.pooledDim = config_.pooledProjectionDim;
  ctx.seed = cfg.train.seed;
  promptEmbedder_ = std::make_unique<train::WordEmbedder>(ctx.textTokens, ctx.textDim, ctx.pooledDim);
  // An images run: the VAE and text encoders fill the caches on the first device (diffusion/ImagesRun.h).
  if (diffusion::hasImagesDataset(cfg)) {
    train::prepareDevices(cfg, st.prepared);
    ctx.bus = &bus;  // T5's load progress, then the datasets' summaries and cache progress
    ctx.stopRequested = st.stopRequested;  // polled between cache batches
    images_ = std::make_unique<diffusion::ImagesRun>(makeFluxImageModels(cfg, ctx, train::firstDevice(st.prepared)), cfg,
                                                 ctx, bus);
    ctx.encoders = &images_->encoders();
    train::stopPoint(st, "loading the VAE and text encoders");
  }
  dataset_ = train::makeDatasets(cfg.datasets, ctx);
  emptyPrompt_ = dataset_->emptyPrompt();
  pixelCode_ = cfg.datasets.front().type == config::DatasetType::Shapes;
  if (images_) {
    train::stopPoint(st, "caching (the image cache is complete and kept)");
    images_->finishCaching();  // sample prompts encoded once; T5 and CLIP freed before step 1
    train::releaseDeviceCaches();
  }
}

void FluxRun::buildAndPlace(train::Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus) {
  const auto& m = cfg.model;
  const train::DeviceSetup dev = train::setUpDevices(cfg, st.prepared);
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
    so.onProgress = [&bus, &st](int64_t done, int64_t total) {
      bus.publish(events::LoadProgressEvent{events::kLoadTransformer, done, total});
      train::stopPoint(st, "loading the transformer (" + std::to_string(done) + " of " + std::to_string(total) + ")");
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
  train::placeBlocks(st, model_->blockList(), dev);
  if (fp8Matmul) st.planReason += "; " + nn::fp8MatmulSummary(fp8);
  if (qtype != nn::QuantType::None) st.placement->attachAll(placement::QuantScaleAttachment::forModel(*model_));
  st.placement->apply();
  st.devices = st.placement->devices();
  if (fp8Matmul) train::checkFp8MatmulRuns(model_->blockList(), bo.dtype);
  rules_ = std::make_unique<flux::FluxLoraRules>(config_);
}

namespace {

// Where microBatch puts each tensor, and microLoss reads it.
enum MicroBatchSlot : size_t { kImg, kTxt, kPooled, kTimestep, kGuidance, kImgIds, kTxtIds, kTarget, kSlots };

}  // namespace

std::vector<at::Tensor> FluxRun::microBatch(train::Trainer::State& st, const config::RunConfig& cfg, int64_t batch,
                                            events::EventBus& bus, int64_t step) {
  // The draw, caption dropout, noise and timesteps: as every flow-matching image family's.
  const auto drawn = diffusion::drawBatch(st, cfg, *dataset_, emptyPrompt_, batch, {}, bus, step);
  const auto& latents = drawn.latents;  // [B, C, H, W]
  const int64_t tokens = drawn.text.size(1);
  const int64_t h = latents.size(2), w = latents.size(3);
  const auto noised = diffusion::noiseBatch(st, cfg, latents, flux::shiftMu((h / 2) * (w / 2)));
  const auto& sigmas = noised.sigmas;

  const auto dev = st.placement->stemDevice();
  // Queued copies (toDeviceAsync): the CPU goes on to launch the forward.
  std::vector<at::Tensor> out(kSlots);
  out[kImg] = train::toDeviceAsync(flux::packLatents(noised.noisy), dev);  // [B, HW/4, 4C]
  out[kTxt] = train::toDeviceAsync(drawn.text, dev);
  out[kPooled] = train::toDeviceAsync(drawn.pooled, dev);
  out[kTimestep] = train::toDeviceAsync(sigmas, dev);
  out[kGuidance] = train::toDeviceAsync(at::full({batch}, cfg.train.guidance, at::kFloat), dev);
  out[kImgIds] = train::toDeviceAsync(flux::imageIds(h, w), dev);
  out[kTxtIds] = train::toDeviceAsync(flux::textIds(tokens), dev);
  out[kTarget] = train::toDeviceAsync(flux::packLatents(noised.target), st.placement->headDevice());
  if (st.phases) st.phases->mark("data");
  return out;
}

at::Tensor FluxRun::microLoss(train::Trainer::State& st, const std::vector<at::Tensor>& batch) {
  flux::FluxInputs in;
  in.img = batch.at(kImg);
  in.txt = batch.at(kTxt);
  in.pooled = batch.at(kPooled);
  in.timestep = batch.at(kTimestep);
  in.guidance = batch.at(kGuidance);
  in.imgIds = batch.at(kImgIds);
  in.txtIds = batch.at(kTxtIds);
  RECORD_USER_SCOPE("strata::forward");  // for bench --profile traces: data is the time before it
  auto prediction = model_->forward(in, st.runner);  // [B, HW/4, 4C]
  return train::flowMatchingLoss(prediction, batch.at(kTarget));
}

void FluxRun::sampleAll(train::Trainer::State& st, const config::RunConfig& cfg, const train::RunFolder& folder,
                        int64_t step, events::EventBus& bus) {
  at::NoGradGuard noGrad;
  const train::SamplingWeights sampling(*st.network, st.ema.get());
  // Latent pixels per image pixel: the images run's VAE, the demo's pixel code, else the VAE's 8 (previews).
  const int64_t scale = images_ ? images_->downscaleFactor() : pixelCode_ ? train::kPixelCodeScale : 8;
  auto even = [](int64_t v) { return std::max<int64_t>(2, v - v % 2); };
  const int64_t h = even(cfg.sample.height / scale), w = even(cfg.sample.width / scale);
  const auto dev = st.placement->stemDevice();
  for (size_t i = 0; i < cfg.sample.prompts.size(); ++i) {
    // An images run samples the prompt with its trigger word, from the real text encoders' embedding.
    const auto& prompt = images_ ? images_->promptText(i) : cfg.sample.prompts[i];
    const int64_t seed = cfg.sample.seed + (cfg.sample.walkSeed ? static_cast<int64_t>(i) : 0);
    try {
      auto g = train::makeCpuGenerator(static_cast<uint64_t>(seed));
      auto noise = at::randn({1, config_.latentChannels(), h, w}, g, at::kFloat);  // [1, C, h, w]
      const auto e = images_          ? images_->promptEmbedding(i)
                     : prompt.empty() ? emptyPrompt_
                                      : promptEmbedder_->embed(prompt);
      auto out = flux::sample(*model_, noise.to(dev), e.txt.unsqueeze(0).to(dev), e.pooled.unsqueeze(0).to(dev),
                              cfg.sample.guidanceScale, cfg.sample.sampleSteps, st.placement.get());
      // [3, h scale, w scale]: decoded by the VAE, or the pixel code / its preview.
      const auto rgb = images_ ? images_->decode(out)[0] : train::latentsToRgb(out[0].to(at::kCPU, at::kFloat));
      const auto path = folder.samplePath(step, static_cast<int64_t>(i));
      io::writePng(
          path, rgb,
          {{"prompt", prompt}, {"step", std::to_string(step)}, {"seed", std::to_string(seed)}, {"Software", "Strata"}});
      folder.appendSampleIndex({{"file", path.filename().string()},
                                {"step", step},
                                {"prompt_index", i},
                                {"prompt", prompt},
                                {"seed", seed}});
      bus.publish(events::SampleEvent{path.string(), step, static_cast<int64_t>(i), prompt, seed});
    } catch (const std::exception& ex) {
      bus.publish(events::WarningEvent{
          "sample " + std::to_string(i) + " at step " + std::to_string(step) + " failed: " + ex.what(), step});
    }
  }
}

std::filesystem::path FluxRun::exportLora(train::Trainer::State& st, const config::RunConfig& cfg,
                                          config::ExportFormat format, const std::filesystem::path& path,
                                          int64_t step, const std::string& runYaml,
                                          const std::string& softwareVersion) {
  lora::writeLoraFile(path, *st.network, *rules_,
                      fluxExportOptions(cfg, format, step, cfg.network.linearAlpha, runYaml, softwareVersion));
  return path;
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
  return diffusion::loraExportOptions(cfg, format, steps, alpha, runYaml, softwareVersion,
                                     cfg.model.nameOrPath.empty()
                                         ? "random FLUX-architecture model (" + config::enumName(cfg.model.preset) + ")"
                                         : cfg.model.nameOrPath);
}

}  // namespace strata::families
