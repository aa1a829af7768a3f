#pragma once
// A FLUX.1 pipeline as users hold it, loaded whole: the transformer, the VAE and
// the text encoders (FluxTextEncoders), from
//   (a) a diffusers folder: model_index.json, transformer/ (sharded or not), vae/,
//       text_encoder/ (CLIP), text_encoder_2/ (T5), tokenizer/, tokenizer_2/;
//   (b) single files as ComfyUI users have them: a BFL transformer
//       (flux1-dev.safetensors), ae.safetensors, clip_l.safetensors,
//       t5xxl_fp16.safetensors, plus a tokenizer folder (tokenizer/ + tokenizer_2/).
// Every component is loaded strictly (missing, unexpected, mis-shaped keys by
// name, the file named); when one fails nothing is returned. Each component gets
// its own dtype. generateImages is FluxPipeline.__call__ on given or seeded latents,
// through the generic image path (diffusion/GenerateImages.h): the VAE as its
// latent codec, T5 + CLIP as its text encoder, the transformer as its denoiser.
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diffusion/GenerateImages.h"
#include "families/flux/FluxTextEncoders.h"
#include "families/flux/FluxTextEncoder.h"
#include "families/flux/FluxVaeCodec.h"
#include "models/flux/FluxSampling.h"
#include "models/vae/VaeConfig.h"

namespace strata::flux {
class FluxTransformer;
}
namespace strata::vae {
class AutoencoderKL;
}

namespace strata::families {

struct PipelineFiles {
  std::filesystem::path transformer;  // diffusers folder / root, or one file (BFL or diffusers names)
  std::filesystem::path vae;          // diffusers folder / root, or ae.safetensors
  TextEncoderFiles text;
  // What single files cannot tell; unset: from config.json, else FLUX.1's values.
  std::vector<int64_t> axesDimsRope;      // the transformer's rotary axes (FLUX.1: 16, 56, 56)
  vae::VaeHints vaeHints;                 // group count, scale / shift (FLUX.1: 32, 0.3611, 0.1159)
  std::filesystem::path schedulerConfig;  // scheduler_config.json (diffusers); empty: FLUX.1's shift constants

  static PipelineFiles fromDiffusersFolder(const std::filesystem::path& root);
  static PipelineFiles fromSingleFiles(const std::filesystem::path& transformerFile,
                                       const std::filesystem::path& vaeFile, const std::filesystem::path& clipFile,
                                       const std::filesystem::path& t5File,
                                       const std::filesystem::path& tokenizerFolder);
  // What model.name_or_path (+ model.vae_path, clip_path, t5_path, tokenizer_path)
  // names: a folder with model_index.json is (a) and the other paths must be empty
  // or name files to use instead of its components; a file is (b) and needs all four.
  static PipelineFiles fromModelPaths(const std::filesystem::path& nameOrPath, const std::filesystem::path& vaePath,
                                      const std::filesystem::path& clipPath, const std::filesystem::path& t5Path,
                                      const std::filesystem::path& tokenizerPath);
};

struct PipelineOptions {
  at::Device device = at::kCPU;
  at::ScalarType transformerDtype = at::kFloat;  // bf16 on a GPU
  at::ScalarType vaeDtype = at::kFloat;          // through vae::vaeComputeDtype (force_upcast keeps fp32)
  TextEncoderOptions text;                       // its device is set to `device`
};

class FluxPipeline {
 public:
  // Throws IoError / LoadError / ConfigError naming the file; never a partial pipeline.
  static std::shared_ptr<FluxPipeline> load(const PipelineFiles& files, const PipelineOptions& options = {});

  flux::FluxTransformer& transformer() { return *transformer_; }
  vae::AutoencoderKL& vae() { return *vae_; }
  FluxTextEncoders& textEncoders() { return *text_; }
  // The pieces of the generic image path (diffusion::generateImages).
  diffusion::TextEncoder& textEncoder() { return *textEncoder_; }
  diffusion::LatentCodec& codec() { return *codec_; }
  // The transformer's side: 2x2 patches, a LoRA file by FLUX.1's names, the
  // flow-match Euler schedule with the scheduler config's shift (mu from the
  // token count).
  diffusion::Denoiser denoiser();
  const flux::ShiftParams& shiftParams() const { return shift_; }
  const PipelineFiles& files() const { return files_; }
  const PipelineOptions& options() const { return options_; }

 private:
  FluxPipeline() = default;
  PipelineFiles files_;
  PipelineOptions options_;
  flux::ShiftParams shift_;
  std::shared_ptr<flux::FluxTransformer> transformer_;
  std::shared_ptr<vae::AutoencoderKL> vae_;
  std::shared_ptr<FluxTextEncoders> text_;
  std::unique_ptr<FluxVaeCodec> codec_;
  std::unique_ptr<FluxTextEncoder> textEncoder_;
};

struct SampleRequest {
  std::vector<std::string> prompts;  // one image per prompt
  std::filesystem::path lora;        // empty: none; else applied at the file's alpha/r, removed afterwards
  double loraMultiplier = 1.0;
  uint64_t seed = 0;  // noise from a CPU generator seeded with it (ignored with `latents`)
  // Given initial latents: [B, C, h, w] or packed [B, (h/2)(w/2), 4C], h = 2 * (height / (2 f)).
  at::Tensor latents;
  int64_t steps = 28;
  double guidance = 3.5;
  int64_t width = 1024;  // pixels; a multiple of 2 f (16 for FLUX.1)
  int64_t height = 1024;
  flux::SampleProgress onStep;  // after each step
};

struct SampleResult {
  at::Tensor images;        // [B, 3, height, width] float32 on the CPU, in [0, 1]
  at::Tensor finalLatents;  // packed [B, N, 4C] float32, before the VAE
};

// Encodes the prompts, samples with the FLUX.1 flow-match Euler schedule (mu from
// the token count), decodes (latents / scale + shift) through the VAE:
// diffusion::generateImages with the pipeline's pieces, latents given packed or
// not. Throws ConfigError for a bad size, step count or latent shape.
SampleResult generateImages(FluxPipeline& pipeline, const SampleRequest& request);

}  // namespace strata::families
