#pragma once
// FLUX.1's side of an images run (train/ImagesRun.h): model.* turned into the
// pipeline's VAE and text encoders (core/pipeline/FluxRunModels), behind
// train::ImageModels.
#include <memory>

#include "config/RunConfig.h"
#include "train/Datasets.h"
#include "train/ImagesRun.h"

namespace strata::families {

// FLUX.1's VAE, T5 and CLIP from model.* (diffusers folder, single files, or
// random weights at the transformer's widths: ctx), on `device`. T5 streamed in
// from its file says how far it is on ctx.bus (events::LoadProgressEvent "T5").
// Throws IoError / LoadError / ConfigError.
std::unique_ptr<train::ImageModels> makeFluxImageModels(const config::RunConfig& cfg, const train::DatasetContext& ctx,
                                                        const c10::Device& device);

}  // namespace strata::families
