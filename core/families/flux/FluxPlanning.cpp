#include "families/flux/FluxPlanning.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/Error.h"
#include "common/Text.h"
#include "lora/LoraTargets.h"
#include "models/flux/FluxLoraRules.h"
#include "diffusion/DiffusionPlanning.h"
#include "diffusion/ImagesRun.h"
#include "families/flux/FluxTextEncoders.h"
#include "families/flux/PipelineShapes.h"
#include "train/AdamW8bit.h"
#include "train/Datasets.h"
#include "train/EncodeCache.h"
#include "train/TrainerSupport.h"

namespace strata::families {

using train::defaultTextTokens;
using train::kCacheBatchSize;
using train::kPixelCodeScale;

flux::FluxConfig withShapeOverrides(flux::FluxConfig c, const config::ModelConfig& m) {
  if (m.numLayers) c.numLayers = *m.numLayers;
  if (m.numSingleLayers) c.numSingleLayers = *m.numSingleLayers;
  if (m.numAttentionHeads) c.numAttentionHeads = *m.numAttentionHeads;
  if (m.attentionHeadDim) c.attentionHeadDim = *m.attentionHeadDim;
  if (m.inChannels) c.inChannels = c.outChannels = *m.inChannels;
  if (m.jointAttentionDim) c.jointAttentionDim = *m.jointAttentionDim;
  if (m.pooledProjectionDim) c.pooledProjectionDim = *m.pooledProjectionDim;
  if (!m.axesDimsRope.empty()) c.axesDimsRope = m.axesDimsRope;
  if (m.guidanceEmbeds) c.guidanceEmbeds = *m.guidanceEmbeds;
  c.validate();
  return c;
}

flux::FluxConfig planFluxConfig(const config::ModelConfig& m, std::string* source) {
  const std::string preset = m.preset.empty() ? "flux-dev" : m.preset;  // the validator checked the name
  std::string from;
  flux::FluxConfig c;
  std::error_code ec;
  if (!m.randomWeights && !m.nameOrPath.empty() && std::filesystem::exists(m.nameOrPath, ec)) {
    c = flux::FluxConfig::fromCheckpoint(m.nameOrPath, m.axesDimsRope);
    from = "shapes of " + m.nameOrPath + " (headers only)";
  } else {
    c = flux::FluxConfig::preset(preset);
    from = "preset " + preset;
    if (!m.randomWeights && !m.nameOrPath.empty()) from += " (" + m.nameOrPath + " not found here)";
  }
  if (source) *source = from;
  return withShapeOverrides(c, m);
}

PlannedTokens planTokenCounts(const config::RunConfig& cfg, const flux::FluxConfig& fc) {
  PlannedTokens out;
  const int64_t defaultText = defaultTextTokens(fc.jointAttentionDim);
  auto fromResolution = [&](const config::DatasetConfig& d) {
    int64_t px = 0;
    for (int64_t r : d.resolution) px = std::max(px, r);
    if (px == 0) px = 512;
    const int64_t latent = px / (d.type == config::DatasetType::Shapes ? kPixelCodeScale : 8);
    out.image = std::max(out.image, (latent / 2) * (latent / 2));
    out.text = std::max(out.text, defaultText);
    return px;
  };
  if (cfg.datasets.empty()) fromResolution(config::DatasetConfig{});
  for (size_t i = 0; i < cfg.datasets.size(); ++i) {
    const auto& d = cfg.datasets[i];
    if (d.type != config::DatasetType::Latents) {
      fromResolution(d);
      continue;
    }
    // The run reads a latents item's size from its file, never datasets[i].resolution.
    const std::string at = "datasets[" + std::to_string(i) + "]";
    std::ostringstream note;
    try {
      if (d.folderPath.empty()) throw Error("no folder_path");
      train::DatasetContext ctx;
      ctx.latentChannels = fc.latentChannels();
      ctx.textDim = fc.jointAttentionDim;
      ctx.pooledDim = fc.pooledProjectionDim;
      const train::LatentsFolderShape shape = train::readLatentsFolderShape(d.folderPath, ctx);
      out.image = std::max(out.image, shape.imageTokens);
      out.text = std::max(out.text, shape.textTokens);
      note << "Tokens of " << at << " from the headers of its " << shape.files << " latents files in " << d.folderPath
           << ": the largest latents are " << shape.latentHeight << "x" << shape.latentWidth << " ("
           << shape.imageTokens << " image tokens), the longest text " << shape.textTokens << " tokens";
      if (shape.skipped > 0) note << " (" << shape.skipped << " files left out: unreadable or mis-shaped)";
      note << ".";
    } catch (const std::exception& e) {
      const int64_t px = fromResolution(d);
      note << at << " (latents): " << e.what() << "; the plan takes its size from " << at << ".resolution (" << px
           << " px), which the run does not read: its size is its files'.";
    }
    out.note += (out.note.empty() ? "" : " ") + note.str();
  }
  return out;
}

int64_t planTokens(const config::RunConfig& cfg, const flux::FluxConfig& fc) {
  return planTokenCounts(cfg, fc).total();
}

double trainStepFlops(const config::RunConfig& cfg, const flux::FluxConfig& fc) {
  const PlannedTokens tokens = planTokenCounts(cfg, fc);
  const lora::LoraTargets targets(cfg.network.targetModules.empty() ? flux::FluxLoraRules(fc).defaultTargets()
                                                                    : cfg.network.targetModules);
  return flux::fluxTrainStepFlops(fc, cfg.train.batchSize, tokens.image, tokens.text, cfg.network.linear,
                                  [&](const std::string& path) { return targets.matches(path); });
}

namespace {

const char* dtypeName(int64_t elementBytes) { return elementBytes == 4 ? "fp32" : "bf16"; }

// Why a dataset type needs no encoder.
std::string whyNoEncoders(const config::RunConfig& cfg) {
  if (cfg.datasets.empty()) return "no dataset";
  switch (cfg.datasets.front().type) {
    case config::DatasetType::Shapes:
      return "the shapes dataset is drawn by the trainer, its captions embedded by word";
    case config::DatasetType::Synthetic:
      return "the synthetic dataset is random latents and embeddings";
    case config::DatasetType::Latents:
      return "the latents dataset holds encoded images and text embeddings";
    case config::DatasetType::Jsonl:
      // The validator refuses it for FLUX; a plan made without validating still says why.
      return "a jsonl dataset is text for a causal LM, with no images to encode (FLUX cannot train on it)";
    case config::DatasetType::Images:
      break;
  }
  return "";
}

}  // namespace

std::vector<placement::OtherModule> fluxOtherModules(const config::RunConfig& cfg, const std::string& device,
                                                     std::string* note) {
  const int64_t px = diffusion::largestImagesResolution(cfg);
  if (px == 0) {
    if (note) *note = "No text encoders or VAE: " + whyNoEncoders(cfg) + ".";
    return {};
  }
  const bool read = !cfg.model.randomWeights && !cfg.model.nameOrPath.empty();
  const PipelineShapes shapes =
      read ? pipelineShapesFromPaths(cfg.model.nameOrPath, cfg.model.vaePath, cfg.model.clipPath, cfg.model.t5Path,
                                     cfg.model.tokenizerPath, cfg.model.vaeNormNumGroups,
                                     cfg.model.clipNumAttentionHeads)
           : PipelineShapes::flux1Presets();
  const bool onCpu = device == "cpu";
  // T5 overflows in fp16, so it runs in bf16 on a GPU whatever train.dtype is; CLIP alike.
  const int64_t textBytes = onCpu ? 4 : 2;
  // The VAE in its compute dtype (vae::vaeComputeDtype): train.dtype on a GPU, fp16 upcast when force_upcast.
  int64_t vaeBytes = 4;
  if (!onCpu && cfg.train.dtype != config::DType::FP32)
    vaeBytes = cfg.train.dtype == config::DType::FP16 && shapes.vae.forceUpcast ? 4 : 2;
  const int64_t batch = kCacheBatchSize;
  const int64_t t5Tokens = TextEncoderOptions{}.maxSequenceLength;
  const bool sampling = cfg.sample.sampleEvery > 0 && !cfg.sample.prompts.empty();

  std::vector<placement::OtherModule> out(3);
  placement::OtherModule& t5 = out[0];
  t5.name = "T5";
  t5.dtype = dtypeName(textBytes);
  t5.paramCount = t5::t5ParamPlan(shapes.t5).totalParams();
  t5.weightBytes = t5.paramCount * textBytes;
  t5.cachingPeakBytes = t5::t5EncodePeakBytes(shapes.t5, batch, t5Tokens, textBytes);
  if (cfg.model.quantizeTe) {
    // model.quantize_te: the block Linears in 1 byte plus a float32 scale per row
    // (one per Linear for float8_e4m3); each matmul converts its weight back to
    // textBytes for as long as it runs, so the largest one is workspace.
    const auto lin = t5::t5LinearCounts(shapes.t5);
    const bool perRow = cfg.model.qtype == "int8" || cfg.model.qtype == "qfloat8";  // as for the blocks
    t5.dtype += " + " + cfg.model.qtype + " Linears";
    t5.weightBytes = (t5.paramCount - lin.weights) * textBytes + lin.weights + (perRow ? lin.rows : lin.count) * 4;
    t5.cachingPeakBytes += lin.largest * textBytes;
  }
  t5.freedBeforeTraining = true;
  t5.cachingStage = 1;  // after the VAE has encoded the images: its peak and T5's weights never meet
  placement::OtherModule& clip = out[1];
  clip.name = "CLIP";
  clip.dtype = dtypeName(textBytes);
  clip.paramCount = clip::clipParamPlan(shapes.clip).totalParams();
  clip.weightBytes = clip.paramCount * textBytes;
  clip.cachingPeakBytes = clip::clipEncodePeakBytes(shapes.clip, batch, textBytes);
  clip.freedBeforeTraining = true;
  clip.cachingStage = 1;
  placement::OtherModule& vae = out[2];
  vae.name = "VAE";
  vae.dtype = vaeBytes == 4 ? "fp32" : config::enumName(cfg.train.dtype);
  vae.paramCount = vae::vaeParamCount(shapes.vae);
  vae.weightBytes = vae.paramCount * vaeBytes;
  vae.cachingPeakBytes = vae::vaeEncodePeakBytes(shapes.vae, batch, px, px, vaeBytes);
  vae.trainingPeakBytes =
      sampling ? vae::vaeDecodePeakBytes(shapes.vae, 1, cfg.sample.height, cfg.sample.width, vaeBytes) : 0;

  if (note) {
    std::ostringstream os;
    os << "The images dataset needs the text encoders and the VAE on " << device << ": T5 (" << shapes.t5Source << ", "
       << t5.dtype << ", " << formatBytes(t5.weightBytes) << ") and CLIP (" << shapes.clipSource << ", " << clip.dtype
       << ", " << formatBytes(clip.weightBytes) << ") load once the VAE (" << shapes.vaeSource << ", " << vae.dtype
       << ", " << formatBytes(vae.weightBytes)
       << ") has encoded the images, encode the captions and the sample prompts, and are freed before step 1; the "
          "VAE stays for the run";
    if (sampling)
      os << " to decode the samples (" << cfg.sample.width << "x" << cfg.sample.height << ", one at a time)";
    os << ". Encoding peaks are for batches of " << batch << " at " << px << " px and " << t5Tokens << " T5 tokens.";
    *note = os.str();
  }
  return out;
}

train::RunPlanInput runPlanInput(const config::RunConfig& cfg, const flux::FluxConfig& fc, int64_t tokens) {
  return diffusion::runPlanInput(cfg, flux::fluxParamPlan(fc), fc.hiddenSize(),
                                 flux::FluxLoraRules(fc).defaultTargets(), tokens,
                                 kFluxActivationElementsPerTokenPerHidden, flux::isModulationLinear);
}

}  // namespace strata::families
