#pragma once
// FluxConfig: the shape of a FLUX transformer (diffusers FluxTransformer2DModel).
// Comes from a diffusers config.json, from a checkpoint's tensor shapes (header
// only, no tensor data) or from a preset; the parameter plan below gives the
// placement planner per-block sizes without building the model (FluxLayout.h).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <functional>
#include <string>
#include <vector>

#include "dit/ParamPlan.h"

namespace strata::flux {

struct FluxConfig {
  int64_t patchSize = 1;                          // patch_size (diffusers keeps 1: packing is done outside)
  int64_t inChannels = 64;                        // in_channels: packed latent channels (16 x 2 x 2)
  int64_t outChannels = 64;                       // out_channels (diffusers: null = in_channels)
  int64_t numLayers = 19;                         // num_layers: double blocks
  int64_t numSingleLayers = 38;                   // num_single_layers
  int64_t attentionHeadDim = 128;                 // attention_head_dim
  int64_t numAttentionHeads = 24;                 // num_attention_heads
  int64_t jointAttentionDim = 4096;               // joint_attention_dim (T5 width)
  int64_t pooledProjectionDim = 768;              // pooled_projection_dim (CLIP pooled width)
  bool guidanceEmbeds = true;                     // guidance_embeds (dev: true, schnell: false)
  std::vector<int64_t> axesDimsRope{16, 56, 56};  // axes_dims_rope, sums to attentionHeadDim
  double ropeTheta = 10000.0;
  double mlpRatio = 4.0;

  static constexpr int64_t kTimestepChannels = 256;  // sinusoidal embedding width
  static constexpr double kNormEps = 1e-6;           // LayerNorm and RMSNorm eps

  int64_t hiddenSize() const { return numAttentionHeads * attentionHeadDim; }
  int64_t mlpHiddenSize() const { return static_cast<int64_t>(hiddenSize() * mlpRatio); }
  int64_t latentChannels() const { return inChannels / 4; }  // before 2x2 packing

  // Throws ConfigError naming the field when the shape is inconsistent.
  void validate() const;

  // Presets: "flux-dev" (FLUX.1-dev, ~11.9 B parameters) and "tiny" (a few M
  // parameters, same structure, for demos and CPU tests).
  static FluxConfig fluxDev();
  static FluxConfig tiny();
  static FluxConfig preset(const std::string& name);  // throws ConfigError on an unknown name

  // From a diffusers config.json object; absent keys take diffusers' defaults.
  static FluxConfig fromDiffusersJson(const nlohmann::json& j);
  static FluxConfig fromDiffusersJsonFile(const std::filesystem::path& path);
  // diffusers config.json object for this config (round-trips with fromDiffusersJson).
  nlohmann::json toDiffusersJson() const;

  // From tensor names and shapes, diffusers or BFL naming (detected). The rotary
  // axes are not in the weights: `axesDimsRope` if given, else (16, 56, 56) for
  // head dim 128, else an even split. Throws LoadError naming a missing key.
  static FluxConfig fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                               const std::vector<int64_t>& axesDimsRope = {});
  // From a checkpoint on disk (diffusers folder, one diffusers file, one BFL
  // file); reads only the safetensors headers (and config.json when present).
  static FluxConfig fromCheckpoint(const std::filesystem::path& path, const std::vector<int64_t>& axesDimsRope = {});

  bool operator==(const FluxConfig& o) const;
  bool operator!=(const FluxConfig& o) const { return !(*this == o); }
};

// The per-block plan structs, moved unchanged to dit/ParamPlan.h (FLUX.2 shares them).
using dit::FluxBlockParams;
using dit::FluxLinearShape;
using dit::FluxParamPlan;

using dit::isModulationLinear;

// Per-block parameter counts and Linear shapes, counted from the layout the model
// is built from (FluxLayout.h; pure, no model is built), so they equal the built
// model's named_parameters() by construction.
FluxParamPlan fluxParamPlan(const FluxConfig& cfg);

// FLOPs of one LoRA training step of the frozen base (dit::trainStepFlops): the
// timestep / text embedders and modulation Linears see one vector per sample.
// `hasLora` says which paths carry an adapter (empty function: none).
double fluxTrainStepFlops(const FluxConfig& cfg, int64_t batch, int64_t imageTokens, int64_t textTokens,
                          int64_t loraRank, const std::function<bool(const std::string&)>& hasLora);

}  // namespace strata::flux
