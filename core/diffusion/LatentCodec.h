#pragma once
// An image model's latent codec as the generic image path sees it: pictures to
// the latents the transformer trains on and back. It owns the latent
// normalisation between its raw latents and the training latents (FLUX.1's VAE:
// (z - shift) * scale; FLUX.2's: batch-norm statistics), so nothing above it
// knows which. A family adapts its VAE to it (families/flux/FluxVaeCodec.h).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace strata::diffusion {

class LatentCodec {
 public:
  virtual ~LatentCodec() = default;
  // pixels [B, 3, H, W] in [-1, 1] -> training latents [B, C, H/f, W/f] (normalised),
  // float32 on the CPU. Throws strata::Error after release().
  virtual at::Tensor encode(const at::Tensor& pixels) = 0;
  // training latents [B, C, h, w] -> rgb [B, 3, h f, w f] in [0, 1], float32 on the
  // CPU. Throws strata::Error after release().
  virtual at::Tensor decode(const at::Tensor& latents) = 0;
  // The normalisation alone: the codec's raw latents <-> training latents.
  virtual at::Tensor normalize(const at::Tensor& raw) const = 0;
  virtual at::Tensor denormalize(const at::Tensor& latents) const = 0;
  // What the latents cache is keyed by (the weights' content and dtype, the
  // normalisation; or the random seed and shapes).
  virtual const std::string& identity() const = 0;
  virtual int64_t latentChannels() const = 0;   // C
  virtual int64_t downscaleFactor() const = 0;  // f: image pixels per latent pixel
  // Frees the weights (nothing left to decode): encode and decode throw afterwards.
  virtual void release() = 0;
};

}  // namespace strata::diffusion
