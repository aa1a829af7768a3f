#pragma once
// FLUX.2's side of an images run (diffusion/ImagesRun.h): model.* turned into the
// VAE (Flux2VaeCodec) and the text encoder (Flux2TextEncoder: Mistral-3 for dev,
// Qwen3 for [klein]) behind diffusion::ImageModels, as FLUX.1's
// families/flux/FluxImageModels.h does for its VAE, T5 and CLIP.
#include <memory>

#include "config/RunConfig.h"
#include "diffusion/ImageModels.h"
#include "families/flux2/Flux2Pipeline.h"
#include "placement/Planner.h"
#include "train/Datasets.h"

namespace strata::families {

// The pipeline files model.* names (the transformer is the trainer's):
//   model.name_or_path a diffusers FLUX.2 folder: its vae/, text_encoder/, tokenizer/
//     and model_index.json's is_distilled;
//   a transformer alone (a single file, or a folder without model_index.json):
//     model.vae_path (flux2-vae.safetensors) and model.text_encoder_path (a
//     transformers folder with its tokenizer), model.distilled.
// Throws ConfigError naming the key that is missing, IoError naming a missing file.
Flux2PipelineFiles flux2RunFiles(const config::ModelConfig& m);

// Whether the run's model is a step-distilled [klein] (one pass when it samples):
// model_index.json's is_distilled for a diffusers folder, else model.distilled.
bool flux2RunDistilled(const config::ModelConfig& m);

// The tokenizer folder and the encoder kind of a random_weights images run:
// model.tokenizer_path (a folder with tokenizer.json, or with tokenizer/), else
// model.text_encoder_path's, else a diffusers model.name_or_path's tokenizer/. The
// kind is the text encoder config's where one is given, else the transformer's:
// mistral3 with a guidance embedding (dev), qwen3 without ([klein]). ConfigError
// naming the keys when there is no tokenizer.
struct Flux2RandomText {
  std::filesystem::path tokenizer;
  Flux2TextEncoderKind kind = Flux2TextEncoderKind::kMistral3;
};
Flux2RandomText flux2RandomRunText(const config::ModelConfig& m, bool guidanceEmbeds);

// The language model a random text encoder of `kind` is built with: the real
// model's (Mistral-Small-3.1; Qwen3-8B, or Qwen3-4B at its width) with the hidden
// size joint_attention_dim / 3 (three tapped layers side by side); below 1024 wide
// (test sizes) 4 heads over the width instead of 32 x 128. ConfigError when it
// does not divide.
llama::LlamaConfig flux2RandomTextConfig(Flux2TextEncoderKind kind, int64_t jointAttentionDim);

// The name the plan gives FLUX.2's text encoder (placement::OtherModule::name): a
// caching plan that splits it names it so (CachingPlan::splitModule).
extern const char* const kFlux2TextEncoderModule;

// FLUX.2's VAE and text encoder from model.* (flux2RunFiles), or random weights at
// the transformer's shapes (ctx: latent channels, joint_attention_dim) and the real
// models' otherwise, on `device`. The VAE is loaded at once (it decodes the
// samples); the text encoder on its first use (a run whose cache is complete never
// reads it), refused then when its files changed since the run started. Its layers
// streamed in say how far they are on ctx.bus (events::LoadProgressEvent "text
// encoder"). model.quantize_te quantizes its decoder layers with model.qtype.
// `caching`: the run's caching plan (train::PreparedRun::plan); where it splits the
// text encoder, each decoder layer is read (and quantized) on its plan device and the
// layers run through a placement over them (Flux2TextEncoderOptions::layerDevices).
// Null or no split: the text encoder whole on `device`.
std::unique_ptr<diffusion::ImageModels> makeFlux2ImageModels(const config::RunConfig& cfg,
                                                             const train::DatasetContext& ctx,
                                                             const c10::Device& device,
                                                             const placement::CachingPlan* caching = nullptr);

// What an images run holds beside the transformer on its first device, for the
// planner: the text encoder (loaded for the caption cache, freed before step 1)
// and the VAE (kept for the samples), with their sizes from the config files only
// (no weights read): a diffusers folder's vae/config.json and text encoder
// config.json, model.text_encoder_path's, else FLUX.2's VAE and the random text
// encoder's shape. The text encoder comes with its stem's, layers' and head's bytes,
// so a plan may split its layers over the run's cards while it caches. None without
// an images dataset; `note` says which.
std::vector<placement::OtherModule> flux2OtherModules(const config::RunConfig& cfg, const std::string& device,
                                                      std::string* note);

}  // namespace strata::families
