#include "families/flux2/Flux2Family.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "diffusion/DiffusionPlanning.h"
#include "diffusion/TrainBatch.h"
#include "lora/LoraFormats.h"
#include "lora/LoraTargets.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "placement/Planner.h"
#include "train/Datasets.h"
#include "train/FlowMatching.h"
#include "train/HostToDevice.h"
#include "train/PhaseTimer.h"
#include "train/TrainerSupport.h"

namespace strata::families {

namespace fs = std::filesystem;

namespace {

// The step count the training shift mu is fitted for (computeEmpiricalMu): the
// Flux2Pipeline's default num_inference_steps, so training sees the sampler's shift.
constexpr int64_t kMuSteps = 50;

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
  const bool tiny = m.preset == config::ModelPreset::Tiny;
  const flux2::Flux2Config preset = tiny ? flux2::Flux2Config::tiny() : flux2::Flux2Config::flux2Dev();
  std::string from;
  flux2::Flux2Config c;
  std::error_code ec;
  if (!m.randomWeights && !m.nameOrPath.empty() && fs::exists(m.nameOrPath, ec)) {
    c = flux2::flux2ConfigFromCheckpoint(m.nameOrPath, preset);
    from = "shapes of " + m.nameOrPath + " (headers only)";
  } else {
    c = preset;
    from = tiny ? "preset tiny" : "preset flux2-dev";
    if (!m.randomWeights && !m.nameOrPath.empty()) from += " (" + m.nameOrPath + " not found here)";
  }
  if (source) *source = from;
  return withShapeOverrides(c, m);
}

int64_t flux2ImageTokens(const config::RunConfig& cfg) {
  const int64_t patches = largestResolution(cfg) / 16;  // 8x VAE, then 2x2 patchify
  return patches * patches;
}

int64_t flux2TextTokens(const flux2::Flux2Config& fc) { return train::defaultTextTokens(fc.jointAttentionDim); }

double flux2TrainStepFlops(const config::RunConfig& cfg, const flux2::Flux2Config& fc) {
  const double image = static_cast<double>(flux2ImageTokens(cfg));
  const double text = static_cast<double>(flux2TextTokens(fc));
  const double batch = static_cast<double>(cfg.train.batchSize);
  const double rank = static_cast<double>(cfg.network.linear);
  const lora::LoraTargets targets(cfg.network.targetModules.empty() ? flux2::Flux2LoraRules(fc).defaultTargets()
                                                                    : cfg.network.targetModules);
  auto contains = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  auto tokensOf = [&](const std::string& path) -> double {
    if (contains(path, "time_guidance_embed") || contains(path, "_modulation") || contains(path, "norm_out.linear"))
      return 1;
    if (path.rfind("single_transformer_blocks.", 0) == 0) return image + text;
    if (contains(path, "context_embedder") || contains(path, "add_q_proj") || contains(path, "add_k_proj") ||
        contains(path, "add_v_proj") || contains(path, "to_add_out") || contains(path, "ff_context"))
      return text;
    return image;
  };
  const auto plan = flux2::flux2ParamPlan(fc);
  double flops = 0;
  auto addUnit = [&](const flux::FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      const double n = tokensOf(l.path) * batch;
      const double in = static_cast<double>(l.inFeatures), out = static_cast<double>(l.outFeatures);
      flops += 4.0 * n * in * out;
      if (rank > 0 && targets.matches(l.path)) flops += 6.0 * n * rank * (in + out);
    }
  };
  addUnit(plan.stem);
  for (const auto& b : plan.blocks) addUnit(b);
  addUnit(plan.head);
  const double seq = image + text;
  flops += 12.0 * batch * seq * seq * static_cast<double>(fc.hiddenSize()) * static_cast<double>(plan.blocks.size());
  return flops;
}

namespace {

lora::LoraExportOptions flux2ExportOptions(const config::RunConfig& cfg, config::ExportFormat format, int64_t steps,
                                           double alpha, const std::string& runYaml,
                                           const std::string& softwareVersion) {
  return diffusion::loraExportOptions(
      cfg, format, steps, alpha, runYaml, softwareVersion,
      cfg.model.nameOrPath.empty() || cfg.model.randomWeights
          ? "random FLUX.2-architecture model (" +
                std::string(cfg.model.preset == config::ModelPreset::Tiny ? "tiny" : "flux2-dev") + ")"
          : cfg.model.nameOrPath);
}

// Where Flux2Run::microBatch puts each tensor, and microLoss reads it.
enum MicroBatchSlot : size_t { kImg, kTxt, kTimestep, kGuidance, kImgIds, kTxtIds, kTarget, kSlots };

class Flux2Run : public train::FamilyRun {
 public:
  void prepareData(train::Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus) override {
    config_ = planFlux2Config(cfg.model);  // the shape prepareRun planned with
    for (size_t i = 0; i < cfg.datasets.size(); ++i)
      if (cfg.datasets[i].type != config::DatasetType::Synthetic)  // the validator refuses it first
        throw ConfigError("datasets[" + std::to_string(i) +
                          "].type: a flux2 model trains on a synthetic dataset only (no FLUX.2 VAE or text encoder)");
    train::DatasetContext ctx;
    ctx.latentChannels = config_.latentChannels();  // before the 2x2 patchify
    ctx.textTokens = flux2TextTokens(config_);
    ctx.textDim = config_.jointAttentionDim;
    ctx.pooledDim = 0;  // FLUX.2 has no pooled text embedding
    ctx.seed = cfg.train.seed;
    dataset_ = train::makeDatasets(cfg.datasets, ctx);
    emptyPrompt_ = dataset_->emptyPrompt();
    (void)st;
    (void)bus;
  }

  void buildAndPlace(train::Trainer::State& st, const config::RunConfig& cfg, events::EventBus& /*bus*/) override {
    const auto& m = cfg.model;
    const train::DeviceSetup dev = train::setUpDevices(cfg, st.prepared);
    at::manual_seed(static_cast<uint64_t>(cfg.train.seed));  // the same random base on resume
    flux2::Flux2BuildOptions bo;
    bo.device = dev.buildDevice;
    bo.dtype = train::scalarTypeOf(cfg.train.dtype);
    const bool loadWeights = !m.nameOrPath.empty() && !m.randomWeights;
    // Loaded weights: each block is built on its plan device. Random weights: each
    // block goes to its plan device as soon as it exists (train::randomBlockHook).
    size_t built = 0;
    if (loadWeights)
      bo.blockDevice = train::planBlockDevice(dev);
    else if (auto hook = train::randomBlockHook(nn::QuantType::None, dev))
      bo.onBlockBuilt = [hook, &built](torch::nn::Module& block) { hook(built++, block); };
    model_ = std::make_shared<flux2::Flux2Transformer>(config_, bo);
    train::stopPoint(st, "building the transformer");
    if (loadWeights) flux2::loadFlux2Weights(*model_, m.nameOrPath);
    for (auto& p : model_->parameters()) p.requires_grad_(false);
    train::placeBlocks(st, model_->blockList(), dev);
    st.placement->apply();
    st.devices = st.placement->devices();
    rules_ = std::make_unique<flux2::Flux2LoraRules>(config_);
  }

  torch::nn::Module& module() override { return *model_; }
  const nn::LoraNameRules& loraRules() const override { return *rules_; }

  // [img (noised, packed), txt, timestep, guidance, imgIds, txtIds, target (packed)]
  std::vector<at::Tensor> microBatch(train::Trainer::State& st, const config::RunConfig& cfg, int64_t batch,
                                     events::EventBus& bus, int64_t step) override {
    // The draw, caption dropout, noise and timesteps: as every flow-matching image family's
    // (FLUX.2 has no pooled vector); the noise in the patchified shape.
    const int64_t tokens = flux2TextTokens(config_);
    diffusion::DrawOptions draw;
    draw.tokens = tokens;
    draw.pooled = false;
    const auto drawn = diffusion::drawBatch(st, cfg, *dataset_, emptyPrompt_, batch, draw, bus, step);
    auto latents = flux2::patchifyLatents(drawn.latents);  // [B, C, H, W] -> [B, 4C, H/2, W/2]
    const int64_t h = latents.size(2), w = latents.size(3);
    const auto noised = diffusion::noiseBatch(st, cfg, latents, flux2::computeEmpiricalMu(h * w, kMuSteps));
    const auto& text = drawn.text;      // [B, N_txt, D]
    const auto& sigmas = noised.sigmas;

    const auto dev = st.placement->stemDevice();
    // Queued copies (toDeviceAsync): the CPU goes on to launch the forward.
    std::vector<at::Tensor> out(kSlots);
    out[kImg] = train::toDeviceAsync(flux2::packLatents(noised.noisy), dev);  // [B, hw, 4C]
    out[kTxt] = train::toDeviceAsync(text, dev);
    out[kTimestep] = train::toDeviceAsync(sigmas, dev);
    out[kGuidance] = train::toDeviceAsync(at::full({batch}, cfg.train.guidance, at::kFloat), dev);
    out[kImgIds] = train::toDeviceAsync(flux2::latentIds(h, w), dev);
    out[kTxtIds] = train::toDeviceAsync(flux2::textIds(tokens), dev);
    out[kTarget] = train::toDeviceAsync(flux2::packLatents(noised.target), st.placement->headDevice());
    if (st.phases) st.phases->mark("data");
    return out;
  }

  at::Tensor microLoss(train::Trainer::State& st, const std::vector<at::Tensor>& batch) override {
    flux2::Flux2Inputs in;
    in.img = batch.at(kImg);
    in.txt = batch.at(kTxt);
    in.timestep = batch.at(kTimestep);
    in.guidance = batch.at(kGuidance);
    in.imgIds = batch.at(kImgIds);
    in.txtIds = batch.at(kTxtIds);
    auto prediction = model_->forward(in, st.runner);  // [B, hw, 4C]
    return train::flowMatchingLoss(prediction, batch.at(kTarget));
  }

  // The validator refuses sampling for flux2; a config that got past it is told why.
  void sampleAll(train::Trainer::State& st, const config::RunConfig& cfg, const train::RunFolder& folder,
                 int64_t step, events::EventBus& bus) override {
    (void)st;
    (void)folder;
    if (!cfg.sample.prompts.empty())
      bus.publish(events::WarningEvent{
          "samples at step " + std::to_string(step) + " skipped: Strata has no FLUX.2 VAE to decode them yet", step});
  }

  fs::path exportLora(train::Trainer::State& st, const config::RunConfig& cfg, config::ExportFormat format,
                      const fs::path& path, int64_t step, const std::string& runYaml,
                      const std::string& softwareVersion) override {
    lora::writeLoraFile(path, *st.network, *rules_,
                        flux2ExportOptions(cfg, format, step, cfg.network.linearAlpha, runYaml, softwareVersion));
    return path;
  }

  void release() override {
    model_.reset();
    rules_.reset();
    dataset_.reset();
  }

 private:
  flux2::Flux2Config config_;
  std::shared_ptr<train::Dataset> dataset_;
  train::TextEmbedding emptyPrompt_;
  std::shared_ptr<flux2::Flux2Transformer> model_;
  std::unique_ptr<flux2::Flux2LoraRules> rules_;
};

class Flux2Family : public train::ModelFamily {
 public:
  config::ModelArch arch() const override { return config::ModelArch::Flux2; }
  std::string displayName() const override { return "FLUX.2"; }
  std::unique_ptr<train::FamilyRun> newRun() const override { return std::make_unique<Flux2Run>(); }

  train::FamilyPlan plan(const config::RunConfig& cfg) const override {
    train::FamilyPlan out;
    const auto fc = planFlux2Config(cfg.model, &out.source);
    out.tokens = flux2ImageTokens(cfg) + flux2TextTokens(fc);
    const auto params = flux2::flux2ParamPlan(fc);
    // FLUX.2's blocks are not on FLUX.1's fused paths: PyTorch's figure.
    // FLUX.1's path rule for the modulation Linears (FLUX.2 names them alike).
    out.input = diffusion::runPlanInput(cfg, params, fc.hiddenSize(), flux2::Flux2LoraRules(fc).defaultTargets(),
                                        out.tokens, placement::CostOptions{}.activationElementsPerTokenPerHidden,
                                        flux::isModulationLinear);
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
    (void)cfg;
    (void)device;
    if (note) *note = "No text encoders or VAE: a FLUX.2 run trains on synthetic latents and text embeddings.";
    return {};
  }
  double trainStepFlops(const config::RunConfig& cfg) const override {
    return flux2TrainStepFlops(cfg, planFlux2Config(cfg.model));
  }
  std::string checkpointPrefix() const override { return "transformer."; }
  std::vector<train::ConfigTemplate> templates() const override {
    return {{"flux2-dev-4x24gb", "flux2-dev-4x24gb.yaml", "FLUX.2-dev split over four 24 GB GPUs (synthetic data)",
             "The 32 B FLUX.2-dev transformer over four cards capped at 24 GB, on random latents and text "
             "embeddings of FLUX.2's shapes (no FLUX.2 VAE or text encoder yet, so no images or samples). "
             "Starts from random weights: set the base model to train the real transformer.",
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
