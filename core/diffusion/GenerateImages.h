#pragma once
// The one text-to-image path (`strata-train sample`, the parity checks): prompts
// through the text encoder, noise (seeded, or given) through the transformer's
// sampler, the final latents through the latent codec. The transformer's side
// comes from its family as a Denoiser: how many latent pixels make a token side,
// how a LoRA file is put on it, and its sampling loop.
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "diffusion/LatentCodec.h"
#include "diffusion/TextEncoder.h"

namespace strata::diffusion {

struct ImageRequest {
  std::vector<std::string> prompts;  // one image per prompt
  std::filesystem::path lora;        // empty: none; else applied at the file's alpha/r, removed afterwards
  double loraMultiplier = 1.0;
  uint64_t seed = 0;   // noise from a CPU generator seeded with it (ignored with `latents`)
  at::Tensor latents;  // given initial latents [B, C, h, w] (training latents), h = p * (height / (p f))
  int64_t steps = 28;
  double guidance = 3.5;
  int64_t width = 1024;  // pixels; a multiple of p f (the denoiser's patch, the codec's factor)
  int64_t height = 1024;
  std::function<void(int64_t done, int64_t total)> onStep;  // after each step
  // What the image should not show, for a denoiser that runs a negative pass
  // (true CFG: FLUX.2 [klein] base); "" is the pipelines' own choice.
  std::string negativePrompt;
};

struct ImageResult {
  at::Tensor images;   // [B, 3, height, width] float32 on the CPU, in [0, 1]
  at::Tensor latents;  // [B, C, h, w] float32 on the CPU: the final training latents, before the codec
};

struct Denoiser {
  int64_t patchSize = 1;  // latent pixels per token side (FLUX: 2)
  // Puts the LoRA file on the transformer at `multiplier`; the function returned
  // takes it off again.
  std::function<std::function<void()>(const std::filesystem::path& lora, double multiplier)> applyLora;
  // Whether a sample of `request` runs a negative pass: generateImages then
  // encodes request.negativePrompt once per prompt for it. Unset: never.
  std::function<bool(const ImageRequest& request)> wantsNegative;
  // noise [B, C, h, w] float32 (CPU), the prompts' encoding and the negative
  // prompt's (tokens undefined without a negative pass) -> the final training
  // latents [B, C, h, w] (any device and dtype).
  std::function<at::Tensor(const at::Tensor& noise, const TextEncoding& text, const TextEncoding& negative,
                           const ImageRequest& request)>
      sample;
};

// The request's prompt count, step count and size, checked as generateImages
// does (ConfigError); returns the latent size {h, w}.
std::pair<int64_t, int64_t> checkImageRequest(const ImageRequest& request, int64_t downscaleFactor, int64_t patchSize);

// Throws ConfigError for a bad size, step count or latent shape; whatever the
// sampler throws (Interrupted from onStep) with the LoRA taken off again.
ImageResult generateImages(TextEncoder& text, LatentCodec& codec, const Denoiser& denoiser,
                           const ImageRequest& request);

}  // namespace strata::diffusion
