#include "families/flux2/Flux2Pipeline.h"

#include "common/Error.h"
#include "families/flux2/Flux2Denoiser.h"
#include "families/flux2/Flux2VaeCodec.h"
#include "io/ContentHash.h"
#include "io/DiffusersFolder.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

constexpr const char* kPipelineClasses[] = {"Flux2Pipeline", "Flux2KleinPipeline"};

bool isFlux2PipelineClass(const std::string& name) {
  for (const char* c : kPipelineClasses)
    if (name == c) return true;
  return false;
}

void requireFile(const fs::path& path, const char* what) {
  if (path.empty()) throw ConfigError(std::string("FLUX.2 single files: no ") + what + " given");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw IoError(path.string() + ": " + what + " file not found");
}

}  // namespace

bool isFlux2PipelineFolder(const fs::path& dir) {
  if (!io::isDiffusersPipelineFolder(dir)) return false;
  try {
    return isFlux2PipelineClass(io::diffusersPipelineInfo(dir).className);
  } catch (const Error&) {
    return false;  // the load that reads it says why
  }
}

Flux2PipelineFiles Flux2PipelineFiles::fromDiffusersFolder(const fs::path& root) {
  if (!io::isDiffusersPipelineFolder(root))
    throw IoError(root.string() + ": not a diffusers pipeline folder (no model_index.json)");
  const auto info = io::diffusersPipelineInfo(root);
  if (!isFlux2PipelineClass(info.className))
    throw ConfigError((root / "model_index.json").string() + ": _class_name '" + info.className +
                      "' is not a FLUX.2 pipeline (Flux2Pipeline, Flux2KleinPipeline)");
  Flux2PipelineFiles f;
  f.transformer = io::diffusersComponentFolder(root, {"Flux2Transformer2DModel"});
  f.vae = io::diffusersComponentFolder(root, {"AutoencoderKLFlux2"});
  f.text = Flux2TextEncoderFiles::fromDiffusersFolder(root);
  f.distilled = info.distilled;
  return f;
}

Flux2PipelineFiles Flux2PipelineFiles::fromSingleFiles(const fs::path& transformerFile, const fs::path& vaeFile,
                                                       const Flux2TextEncoderFiles& text) {
  requireFile(transformerFile, "transformer");
  requireFile(vaeFile, "VAE");
  if (text.encoder.empty()) throw ConfigError("FLUX.2 single files: no text encoder folder given");
  Flux2PipelineFiles f;
  f.transformer = transformerFile;
  f.vae = vaeFile;
  f.text = text;
  return f;
}

std::shared_ptr<Flux2Pipeline> Flux2Pipeline::load(const Flux2PipelineFiles& files,
                                                   const Flux2PipelineOptions& options) {
  std::shared_ptr<Flux2Pipeline> p(new Flux2Pipeline());
  p->files_ = files;
  p->options_ = options;
  p->options_.text.device = options.device;

  // The transformer: shapes from the weights; what they do not hold from
  // config.json (a folder) or the user's hints (single files), else FLUX.2's.
  flux2::Flux2Config base;
  if (!files.axesDimsRope.empty()) base.axesDimsRope = files.axesDimsRope;
  const auto cfg = flux2::flux2ConfigFromCheckpoint(files.transformer, base);
  p->transformer_ = flux2::streamFlux2Transformer(flux2::openFlux2Checkpoint(files.transformer), cfg,
                                                  {options.device, options.transformerDtype});
  for (auto& param : p->transformer_->parameters()) param.requires_grad_(false);
  p->guidance_ = flux2::guidanceModeOf(cfg, files.distilled);

  // The VAE, hashed before and after: the codec's identity names what was loaded.
  const std::string vaeStamp = io::weightsStamp(files.vae);
  auto vae = vae::loadAutoencoderKL(files.vae, {options.device, options.vaeDtype}, files.vaeHints);
  if (io::weightsStamp(files.vae) != vaeStamp)
    throw LoadError(files.vae.string() + ": changed while it was being loaded; load it again");
  p->codec_ = std::make_unique<Flux2VaeCodec>(vae, "vae " + vaeStamp);  // refuses a VAE that is not FLUX.2's

  // The text encoder: its weights read on the first encode.
  const auto textFiles = files.text;
  const auto textOptions = p->options_.text;
  p->textEncoder_ = std::make_unique<Flux2TextEncoder>(
      [textFiles, textOptions] { return Flux2PromptEncoder::load(textFiles, textOptions); },
      flux2TextEncoderIdentity(textFiles, flux2TextEncoderKindOf(textFiles.encoder), textOptions),
      textOptions.maxSequenceLength);
  return p;
}

Flux2Pipeline::~Flux2Pipeline() = default;

diffusion::Denoiser Flux2Pipeline::denoiser() { return flux2Denoiser(*transformer_, options_.device, guidance_); }

}  // namespace strata::families
