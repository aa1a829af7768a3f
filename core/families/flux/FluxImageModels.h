#pragma once
// FLUX.1's side of an images run (diffusion/ImagesRun.h): model.* turned into the
// VAE (FluxVaeCodec) and T5 + CLIP (FluxTextEncoder) behind diffusion::ImageModels.
#include <memory>

#include "config/RunConfig.h"
#include "diffusion/ImageModels.h"
#include "train/Datasets.h"

namespace strata::families {

// FLUX.1's VAE, T5 and CLIP from model.* (diffusers folder, single files, or
// random weights at the transformer's widths: ctx), on `device`. The VAE is
// loaded at once (it decodes the samples); T5 and CLIP on their first use, and
// refused then when their files changed since. T5 streamed in from its file says
// how far it is on ctx.bus (events::LoadProgressEvent "T5"). Throws IoError /
// LoadError / ConfigError naming the file.
std::unique_ptr<diffusion::ImageModels> makeFluxImageModels(const config::RunConfig& cfg,
                                                            const train::DatasetContext& ctx,
                                                            const c10::Device& device);

}  // namespace strata::families
