#pragma once
// The FLUX.2 transformer as the generic image path's denoiser
// (diffusion/GenerateImages.h): the codec's training latents [B, C, h, w]
// (FLUX.2's VAE codec: batch-norm normalised, unpatchified) go in as 2x2 patches,
// one token each, as the training step feeds them; the sampler is Flux2Pipeline's (empirical mu) with the model's
// guidance: the guidance embedding (dev), true CFG against the request's negative prompt (klein base, scale above 1) or
// none (klein distilled).
#include <ATen/ATen.h>

#include "diffusion/GenerateImages.h"
#include "models/flux2/Flux2Sampling.h"

namespace strata::flux2 {
class Flux2Transformer;
}

namespace strata::families {

// `model` must outlive the denoiser; its LoRA files are read with FLUX.2's rules.
diffusion::Denoiser flux2Denoiser(flux2::Flux2Transformer& model, const at::Device& device,
                                  flux2::Flux2GuidanceMode mode);

}  // namespace strata::families
