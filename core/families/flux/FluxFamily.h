#pragma once
// FLUX.1 (dev, schnell: models/flux, with its VAE, T5 and CLIP: FluxVaeCodec, FluxTextEncoder) as a
// train::ModelFamily: its planning (FluxPlanning), its side of a run (FluxRun:
// datasets, the placed transformer, flow-matching steps, image samples, the
// diffusers / kohya / comfy LoRA files) and the images run's encoders
// (FluxImageModels). Registered once, in core/families/Registration.cpp.
#include <memory>

#include "train/ModelFamily.h"

namespace strata::families {

std::shared_ptr<const train::ModelFamily> makeFluxFamily();

}  // namespace strata::families
