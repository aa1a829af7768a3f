#pragma once
// FLUX.2 (models/flux2) as a train::ModelFamily. A run trains the transformer's
// LoRA on a folder of images (its VAE and text encoder fill the shared image
// cache: families/flux2/Flux2ImageModels.h, diffusion/ImagesRun.h; samples are
// decoded by the VAE with the model's guidance) or on synthetic latents and text
// embeddings of the model's shapes. The rest is shared with FLUX.1 through
// core/diffusion (TrainBatch: the draw, caption dropout, noise and timesteps;
// DiffusionPlanning: the planner's per-block input, the LoRA files' options),
// not through FLUX.1's family: blocks on their plan devices, the flow-matching
// loss, the diffusers / kohya / comfy LoRA files (Flux2LoraRules). Registered once, in
// core/families/Registration.cpp.
#include <cstdint>
#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "models/flux2/Flux2Config.h"
#include "train/ModelFamily.h"

namespace strata::families {

std::shared_ptr<const train::ModelFamily> makeFlux2Family();

// The model's shape: the checkpoint's headers when weights are read (random_weights
// off, model.name_or_path present here), else the preset (tiny, else flux2-dev);
// then the config's shape keys (model.num_layers, ...), validated. `source`
// (optional) says which.
flux2::Flux2Config planFlux2Config(const config::ModelConfig& m, std::string* source = nullptr);

// Image tokens of one sample at the largest dataset resolution (the VAE's 8x,
// then the 2x2 patchify) and the text tokens the run gives the transformer: the
// pipelines' max_sequence_length (512) for an images run, whose text encoder pads
// every prompt to it, else the synthetic embeddings' (train::defaultTextTokens).
int64_t flux2ImageTokens(const config::RunConfig& cfg);
int64_t flux2TextTokens(const config::RunConfig& cfg, const flux2::Flux2Config& fc);

// FLOPs of one LoRA training step (frozen base; FLUX.1's rules, flux::fluxTrainStepFlops):
// a Linear 4 x tokens x in x out, a LoRA 6 x tokens x r x (in + out), attention
// 12 x B x L^2 x hidden per block. The embedders and the shared modulation see one
// token per sample, a double block's text Linears the text tokens, its image
// Linears the image tokens, a single block both.
double flux2TrainStepFlops(const config::RunConfig& cfg, const flux2::Flux2Config& fc);

}  // namespace strata::families
