#include "families/flux/FluxPipeline.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "io/JsonFile.h"
#include "common/ShapeText.h"
#include "io/DiffusersFolder.h"
#include "lora/LoraFormats.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

// A single VAE file of a FLUX.1 pipeline holds no config: FLUX.1's latent scale
// and shift whatever its channel count (the shapes alone would guess SD's for a
// VAE without 16 channels). The group count stays the loader's default (32).
vae::VaeHints fluxVaeHints() {
  vae::VaeHints h;
  h.scalingFactor = vae::VaeConfig::flux1().scalingFactor;
  h.shiftFactor = vae::VaeConfig::flux1().shiftFactor;
  return h;
}

}  // namespace

PipelineFiles PipelineFiles::fromDiffusersFolder(const fs::path& root) {
  if (!io::isDiffusersPipelineFolder(root))
    throw IoError(root.string() + ": not a diffusers pipeline folder (no model_index.json)");
  PipelineFiles f;
  f.transformer = io::diffusersComponentFolder(root, {"FluxTransformer2DModel"});
  f.vae = io::diffusersComponentFolder(root, {"AutoencoderKL"});
  f.text = TextEncoderFiles::fromDiffusersFolder(root);
  const auto scheduler = io::diffusersComponentFolder(root, {"FlowMatchEulerDiscreteScheduler"});
  f.schedulerConfig = scheduler / "scheduler_config.json";
  if (!fs::is_regular_file(f.schedulerConfig))
    throw IoError(f.schedulerConfig.string() + ": missing (model_index.json names the scheduler folder)");
  return f;
}

PipelineFiles PipelineFiles::fromSingleFiles(const fs::path& transformerFile, const fs::path& vaeFile,
                                             const fs::path& clipFile, const fs::path& t5File,
                                             const fs::path& tokenizerFolder) {
  const std::pair<const char*, fs::path> named[] = {
      {"transformer", transformerFile}, {"VAE", vaeFile}, {"CLIP", clipFile}, {"T5", t5File}};
  for (const auto& [what, path] : named) {
    if (path.empty()) throw ConfigError(std::string("single-file pipeline: no ") + what + " file given");
    if (!fs::is_regular_file(path)) throw IoError(path.string() + ": " + what + " file not found");
  }
  PipelineFiles f;
  f.transformer = transformerFile;
  f.vae = vaeFile;
  f.vaeHints = fluxVaeHints();
  f.text = TextEncoderFiles::fromSingleFiles(t5File, clipFile, tokenizerFolder);
  return f;
}

PipelineFiles PipelineFiles::fromModelPaths(const fs::path& nameOrPath, const fs::path& vaePath,
                                            const fs::path& clipPath, const fs::path& t5Path,
                                            const fs::path& tokenizerPath) {
  if (nameOrPath.empty()) throw ConfigError("model.name_or_path: no model given");
  if (fs::is_directory(nameOrPath)) {
    auto f = fromDiffusersFolder(nameOrPath);
    // Single files replace the folder's components (a folder's tokenizers stay unless given).
    if (!vaePath.empty()) {
      f.vae = vaePath;
      f.vaeHints = fluxVaeHints();
    }
    if (!clipPath.empty()) f.text.clip = clipPath;
    if (!t5Path.empty()) f.text.t5 = t5Path;
    if (!tokenizerPath.empty()) {
      const auto t = TextEncoderFiles::fromSingleFiles(f.text.t5, f.text.clip, tokenizerPath);
      f.text.t5Tokenizer = t.t5Tokenizer;
      f.text.clipTokenizer = t.clipTokenizer;
    }
    return f;
  }
  if (!fs::is_regular_file(nameOrPath)) throw IoError(nameOrPath.string() + ": model not found");
  const std::pair<const char*, fs::path> keys[] = {{"model.vae_path", vaePath},
                                                   {"model.clip_path", clipPath},
                                                   {"model.t5_path", t5Path},
                                                   {"model.tokenizer_path", tokenizerPath}};
  for (const auto& [key, path] : keys)
    if (path.empty())
      throw ConfigError(std::string(key) + ": required with a single-file transformer (" + nameOrPath.string() +
                        "); see docs/pipeline.md");
  return fromSingleFiles(nameOrPath, vaePath, clipPath, t5Path, tokenizerPath);
}

namespace {

// The dynamic-shift constants of a diffusers scheduler_config.json.
flux::ShiftParams readShiftParams(const fs::path& path) {
  flux::ShiftParams p;
  if (path.empty()) return p;
  const nlohmann::json j = io::readJsonFile(path);
  try {
    if (j.contains("use_dynamic_shifting") && !j.at("use_dynamic_shifting").get<bool>())
      throw IoError(path.string() + ": use_dynamic_shifting false is not supported (FLUX.1 shifts by resolution)");
    p.baseSeqLen = j.value("base_image_seq_len", p.baseSeqLen);
    p.maxSeqLen = j.value("max_image_seq_len", p.maxSeqLen);
    p.baseShift = j.value("base_shift", p.baseShift);
    p.maxShift = j.value("max_shift", p.maxShift);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path.string() + ": " + e.what());
  }
  if (p.maxSeqLen == p.baseSeqLen)
    throw IoError(path.string() + ": base_image_seq_len equals max_image_seq_len (mu undefined)");
  return p;
}

}  // namespace

std::shared_ptr<FluxPipeline> FluxPipeline::load(const PipelineFiles& files, const PipelineOptions& options) {
  // Standalone sampling runs flash attention: model.attention_backend (cuDNN by
  // default) is a training setting, measured in training (docs/training.md).
  compat::setCudnnAttention(false);
  std::shared_ptr<FluxPipeline> p(new FluxPipeline());
  p->files_ = files;
  p->options_ = options;
  p->options_.text.device = options.device;
  p->shift_ = readShiftParams(files.schedulerConfig);
  // The cheap checks first: every header is read before any weight is copied.
  flux::FluxBuildOptions build;
  build.device = options.device;
  build.dtype = options.transformerDtype;
  p->transformer_ = flux::loadFluxTransformer(files.transformer, build, files.axesDimsRope);
  for (auto& t : p->transformer_->parameters()) t.set_requires_grad(false);
  p->vae_ = vae::loadAutoencoderKL(files.vae, {options.device, options.vaeDtype}, files.vaeHints);
  for (auto& t : p->vae_->parameters()) t.set_requires_grad(false);
  p->codec_ = std::make_unique<FluxVaeCodec>(
      p->vae_, "vae " + files.vae.string() + " (" + std::string(c10::toString(p->vae_->dtype())) + ")");
  const auto& fc = p->transformer_->config();
  const auto& vc = p->vae_->config();
  if (fc.latentChannels() != vc.latentChannels)
    throw LoadError(files.transformer.string() + " and " + files.vae.string() + ": the transformer takes " +
                    std::to_string(fc.latentChannels()) + " latent channels, the VAE gives " +
                    std::to_string(vc.latentChannels));
  p->text_ = FluxTextEncoders::load(files.text, p->options_.text);
  if (p->text_->t5Width() != fc.jointAttentionDim || p->text_->pooledWidth() != fc.pooledProjectionDim)
    throw LoadError(files.transformer.string() + ": joint_attention_dim " + std::to_string(fc.jointAttentionDim) +
                    " / pooled_projection_dim " + std::to_string(fc.pooledProjectionDim) + " do not fit T5 (" +
                    files.text.t5.string() + ", d_model " + std::to_string(p->text_->t5Width()) + ") / CLIP (" +
                    files.text.clip.string() + ", hidden " + std::to_string(p->text_->pooledWidth()) + ")");
  p->textEncoder_ = std::make_unique<FluxTextEncoder>(p->text_);
  return p;
}

diffusion::Denoiser FluxPipeline::denoiser() {
  diffusion::Denoiser d;
  d.patchSize = 2;
  flux::FluxTransformer* model = transformer_.get();
  d.applyLora = [model](const fs::path& lora, double multiplier) -> std::function<void()> {
    auto net = lora::loadLoraNetwork(*model, flux::FluxLoraRules(model->config()), lora);
    net->setMultiplier(multiplier);
    return [net] { net->detach(); };
  };
  d.sample = [model, device = options_.device, shift = shift_](
                 const at::Tensor& noise, const diffusion::TextEncoding& text,
                 const diffusion::TextEncoding& /*negative: FLUX.1 has no negative pass*/,
                 const diffusion::ImageRequest& r) {
    const int64_t h = noise.size(2), w = noise.size(3);
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
    const auto packed = flux::packLatents(noise).to(device);     // [B, tokens, 4C]
    const auto txt = text.tokens.to(device, model->dtype());     // [B, L, joint_attention_dim]
    const auto pooled = text.pooled.to(device, model->dtype());  // [B, pooled_projection_dim]
    const auto sigmas = flux::samplingSigmas(r.steps, flux::shiftMu((h / 2) * (w / 2), shift));
    const auto out = flux::samplePacked(*model, packed, flux::imageIds(h, w, opts), txt,
                                        flux::textIds(txt.size(1), opts), pooled, r.guidance, sigmas, nullptr,
                                        r.onStep);  // [B, tokens, 4C]
    return flux::unpackLatents(out, h, w);          // [B, C, h, w] training latents
  };
  return d;
}

SampleResult generateImages(FluxPipeline& pipeline, const SampleRequest& request) {
  diffusion::ImageRequest r;
  r.prompts = request.prompts;
  r.lora = request.lora;
  r.loraMultiplier = request.loraMultiplier;
  r.seed = request.seed;
  r.steps = request.steps;
  r.guidance = request.guidance;
  r.width = request.width;
  r.height = request.height;
  r.onStep = request.onStep;
  auto& codec = pipeline.codec();
  const auto [h, w] = diffusion::checkImageRequest(r, codec.downscaleFactor(), 2);
  if (request.latents.defined()) {
    // Given latents: unpacked [B, C, h, w], or packed as the transformer takes them.
    const auto& l = request.latents;
    const int64_t batch = static_cast<int64_t>(request.prompts.size()), c = codec.latentChannels();
    const int64_t tokens = (h / 2) * (w / 2);
    const std::vector<int64_t> unpackedShape{batch, c, h, w}, packedShape{batch, tokens, 4 * c};
    if (l.dim() == 4 && l.sizes().vec() == unpackedShape) {
      r.latents = l;
    } else if (l.dim() == 3 && l.sizes().vec() == packedShape) {
      r.latents = flux::unpackLatents(l.to(at::kFloat), h, w);
    } else {
      throw ConfigError("sample: initial latents of shape " + shapeText(l.sizes().vec()) + " fit neither " +
                        shapeText(unpackedShape) + " nor packed " + shapeText(packedShape));
    }
  }
  const auto out = diffusion::generateImages(pipeline.textEncoder(), codec, pipeline.denoiser(), r);
  SampleResult result;
  result.images = out.images;
  result.finalLatents = flux::packLatents(out.latents);  // [B, tokens, 4C] float32
  return result;
}

}  // namespace strata::families
