#include "diffusion/GenerateImages.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include "common/Error.h"
#include "common/ShapeText.h"

namespace strata::diffusion {

std::pair<int64_t, int64_t> checkImageRequest(const ImageRequest& request, int64_t downscaleFactor, int64_t patchSize) {
  if (request.prompts.empty()) throw ConfigError("sample: no prompt given");
  if (request.steps < 1) throw ConfigError("sample: steps must be at least 1, got " + std::to_string(request.steps));
  const int64_t m = patchSize * downscaleFactor;
  if (request.width < m || request.height < m || request.width % m || request.height % m)
    throw ConfigError("sample: width and height must be positive multiples of " + std::to_string(m) + ", got " +
                      std::to_string(request.width) + "x" + std::to_string(request.height));
  // Latent size: diffusers' p * (H // (p f)).
  return {patchSize * (request.height / m), patchSize * (request.width / m)};
}

ImageResult generateImages(TextEncoder& text, LatentCodec& codec, const Denoiser& denoiser,
                           const ImageRequest& request) {
  const auto [h, w] = checkImageRequest(request, codec.downscaleFactor(), denoiser.patchSize);
  const int64_t batch = static_cast<int64_t>(request.prompts.size());
  const std::vector<int64_t> shape{batch, codec.latentChannels(), h, w};
  at::Tensor noise;  // [B, C, h, w] float32
  if (request.latents.defined()) {
    if (request.latents.sizes().vec() != shape)
      throw ConfigError("sample: initial latents of shape " + shapeText(request.latents.sizes().vec()) +
                        " do not fit " + shapeText(shape));
    noise = request.latents.to(at::kFloat);
  } else {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(request.seed);
    noise = at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
  }
  std::function<void()> removeLora;
  if (!request.lora.empty()) removeLora = denoiser.applyLora(request.lora, request.loraMultiplier);
  at::NoGradGuard noGrad;
  ImageResult result;
  try {
    const auto encoding = text.encode(request.prompts);
    TextEncoding negative;
    if (denoiser.wantsNegative && denoiser.wantsNegative(request))
      negative = text.encode(std::vector<std::string>(request.prompts.size(), request.negativePrompt));
    const auto latents = denoiser.sample(noise, encoding, negative, request);  // [B, C, h, w]
    result.images = codec.decode(latents);
    result.latents = latents.to(at::kCPU, at::kFloat);
  } catch (...) {
    if (removeLora) removeLora();
    throw;
  }
  if (removeLora) removeLora();  // the transformer is the base model again
  return result;
}

}  // namespace strata::diffusion
