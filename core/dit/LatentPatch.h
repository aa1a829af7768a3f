#pragma once
// The patchify of image latents into channels that FLUX.2 trains on (diffusers
// Flux2Pipeline._patchify_latents, 2x2): below the models, because FLUX.2's VAE
// (models/vae: its batch norm normalises the patchified latents) and FLUX.2's
// transformer and sampler (models/flux2) both need it, and neither includes the other.
#include <ATen/ATen.h>

#include <cstdint>

namespace strata::dit {

// [B, C, H, W] -> [B, C * rows * cols, H / rows, W / cols]: each rows x cols patch
// into channels, in the order (c, dy, dx). H and W must be multiples of the patch.
at::Tensor patchifyLatents(const at::Tensor& latents, int64_t rows = 2, int64_t cols = 2);
// The inverse: [B, C * rows * cols, h, w] -> [B, C, h * rows, w * cols].
at::Tensor unpatchifyLatents(const at::Tensor& patchified, int64_t rows = 2, int64_t cols = 2);

}  // namespace strata::dit
