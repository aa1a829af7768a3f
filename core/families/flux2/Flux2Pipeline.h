#pragma once
// A FLUX.2 pipeline as users hold it, loaded whole: the transformer, the VAE
// (AutoencoderKLFlux2) and the text encoder (Mistral-3 for FLUX.2-dev, Qwen3 for
// [klein]) with its tokenizer, from
//   (a) a diffusers folder: model_index.json (Flux2Pipeline / Flux2KleinPipeline,
//       is_distilled), transformer/, vae/, text_encoder/, tokenizer/;
//   (b) BFL single files: the transformer (flux2-dev.safetensors,
//       flux-2-klein-9b.safetensors), flux2-vae.safetensors, and the text encoder
//       as transformers saves it (a folder with its tokenizer).
// Every component is loaded strictly, the file named on failure; nothing partial
// is returned. The pieces of the generic image path (diffusion/GenerateImages.h):
// the text encoder, the VAE as latent codec, the transformer as denoiser with the
// model's guidance (guidance embedding, true CFG, or none for distilled [klein]).
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "diffusion/GenerateImages.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/vae/VaeConfig.h"

namespace strata::flux2 {
class Flux2Transformer;
}

namespace strata::families {

struct Flux2PipelineFiles {
  std::filesystem::path transformer;  // diffusers component / root, or one file (BFL or diffusers names)
  std::filesystem::path vae;          // diffusers component, or flux2-vae.safetensors
  Flux2TextEncoderFiles text;
  // model_index.json's is_distilled ([klein] step-distilled: one pass, no CFG). Single
  // files do not say: the user does (sample --distilled, model.distilled).
  bool distilled = false;
  // What single files cannot tell; unset: config.json's, else FLUX.2's values.
  std::vector<int64_t> axesDimsRope;
  vae::VaeHints vaeHints;

  static Flux2PipelineFiles fromDiffusersFolder(const std::filesystem::path& root);
  // The text encoder: Flux2TextEncoderFiles::fromTransformersFolder, or a diffusers
  // folder's (its text_encoder/ and tokenizer/).
  static Flux2PipelineFiles fromSingleFiles(const std::filesystem::path& transformerFile,
                                            const std::filesystem::path& vaeFile, const Flux2TextEncoderFiles& text);
};

// True for a diffusers folder whose model_index.json names a FLUX.2 pipeline.
bool isFlux2PipelineFolder(const std::filesystem::path& dir);

struct Flux2PipelineOptions {
  at::Device device = at::kCPU;
  at::ScalarType transformerDtype = at::kFloat;  // bf16 on a GPU
  at::ScalarType vaeDtype = at::kFloat;
  Flux2TextEncoderOptions text;  // its device is set to `device`
};

class Flux2Pipeline {
 public:
  // Throws IoError / LoadError / ConfigError naming the file; never a partial pipeline.
  static std::shared_ptr<Flux2Pipeline> load(const Flux2PipelineFiles& files, const Flux2PipelineOptions& options = {});
  ~Flux2Pipeline();

  flux2::Flux2Transformer& transformer() { return *transformer_; }
  diffusion::TextEncoder& textEncoder() { return *textEncoder_; }
  diffusion::LatentCodec& codec() { return *codec_; }
  diffusion::Denoiser denoiser();
  flux2::Flux2GuidanceMode guidanceMode() const { return guidance_; }
  const Flux2PipelineFiles& files() const { return files_; }

 private:
  Flux2Pipeline() = default;
  Flux2PipelineFiles files_;
  Flux2PipelineOptions options_;
  flux2::Flux2GuidanceMode guidance_ = flux2::Flux2GuidanceMode::Embedded;
  std::shared_ptr<flux2::Flux2Transformer> transformer_;
  std::unique_ptr<diffusion::LatentCodec> codec_;
  std::unique_ptr<Flux2TextEncoder> textEncoder_;
};

}  // namespace strata::families
