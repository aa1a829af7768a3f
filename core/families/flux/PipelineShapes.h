#pragma once
// The parts of a FLUX.1 pipeline besides the transformer, sized without reading a
// weight: T5 and CLIP (the text encoders) and the VAE. From the files the model
// paths name (config.json, else the safetensors headers), or FLUX.1's presets
// (T5-XXL, CLIP-L, the FLUX.1 VAE) when the weights are random or the files are
// not on this machine (a preview for another one). Light to include (no ATen):
// the planner and the app use it.
#include <cstdint>
#include <optional>
#include <string>

#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"
#include "models/vae/VaeConfig.h"

namespace strata::families {

struct PipelineShapes {
  t5::T5Config t5;
  clip::ClipTextConfig clip;
  vae::VaeConfig vae;
  // For the user: "preset t5-xxl", "config.json of /m/text_encoder_2", "shapes of /m/ae.safetensors (headers only)".
  std::string t5Source, clipSource, vaeSource;

  static PipelineShapes flux1Presets();
};

// The shapes of what model.name_or_path (+ vae_path, clip_path, t5_path,
// tokenizer_path) names, by PipelineFiles::fromModelPaths' rules (a diffusers
// folder, or a single-file transformer with single files for the rest). A
// component whose path is not on this machine falls back to its FLUX.1 preset and
// says so in its source. Throws IoError / LoadError / ConfigError naming the file
// or key for paths that are here but wrong. `vaeNormNumGroups` and
// `clipNumAttentionHeads` (model.vae_norm_num_groups, model.clip_num_attention_heads)
// say what a single VAE / CLIP file does not hold.
PipelineShapes pipelineShapesFromPaths(const std::string& nameOrPath, const std::string& vaePath,
                                       const std::string& clipPath, const std::string& t5Path,
                                       const std::string& tokenizerPath,
                                       std::optional<int64_t> vaeNormNumGroups = std::nullopt,
                                       std::optional<int64_t> clipNumAttentionHeads = std::nullopt);

}  // namespace strata::families
