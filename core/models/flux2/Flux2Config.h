#pragma once
// Flux2Config: the shape of a FLUX.2 transformer (diffusers Flux2Transformer2DModel).
// Comes from a diffusers config.json (a reference manifest's "config" object is
// the same), from a checkpoint's tensor shapes (diffusers or BFL names, header
// only) or from a preset. The per-block plan for the placement planner is counted
// from the layout the model is built from (Flux2Layout.h).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace strata::flux2 {

struct Flux2Config {
  // Defaults: FLUX.2-dev (see flux2Dev()).
  int64_t patchSize = 1;                              // patch_size (latents are patchified 2x2 outside)
  int64_t inChannels = 128;                           // in_channels: patchified latent channels (32 x 2 x 2)
  int64_t outChannels = 128;                          // out_channels (diffusers: null = in_channels)
  int64_t numLayers = 8;                              // num_layers: double-stream blocks
  int64_t numSingleLayers = 48;                       // num_single_layers
  int64_t attentionHeadDim = 128;                     // attention_head_dim
  int64_t numAttentionHeads = 48;                     // num_attention_heads
  int64_t jointAttentionDim = 15360;                  // joint_attention_dim (3 Mistral layers x 5120)
  int64_t timestepGuidanceChannels = 256;             // timestep_guidance_channels: sinusoid width
  double mlpRatio = 3.0;                              // mlp_ratio (SwiGLU hidden = int(hidden x ratio))
  std::vector<int64_t> axesDimsRope{32, 32, 32, 32};  // axes_dims_rope (t, h, w, l), sums to attentionHeadDim
  double ropeTheta = 2000.0;                          // rope_theta
  double eps = 1e-6;                                  // eps of every LayerNorm and RMSNorm
  bool guidanceEmbeds = true;                         // guidance_embeds (dev is guidance-distilled)

  int64_t hiddenSize() const { return numAttentionHeads * attentionHeadDim; }
  int64_t mlpHiddenSize() const { return static_cast<int64_t>(static_cast<double>(hiddenSize()) * mlpRatio); }
  int64_t latentChannels() const { return inChannels / 4; }  // before the 2x2 patchify

  // Throws ConfigError naming the key when the shape is inconsistent.
  void validate() const;

  // Presets: "flux2-dev" (FLUX.2-dev, ~32 B parameters), "flux2-klein-9b" and
  // "flux2-klein-4b" (FLUX.2 [klein], no guidance embedding; base and distilled
  // share the shape) and "tiny" (same structure, CPU-sized).
  static Flux2Config flux2Dev();
  static Flux2Config klein9b();
  static Flux2Config klein4b();
  static Flux2Config tiny();
  static std::vector<std::string> presetNames();
  static Flux2Config preset(const std::string& name);  // ConfigError on an unknown name

  // From a diffusers config.json object; absent keys take diffusers' defaults
  // (those of FLUX.2-dev); a key of the wrong type or an invalid shape is a
  // ConfigError naming the key.
  static Flux2Config fromDiffusersJson(const nlohmann::json& j);
  static Flux2Config fromDiffusersJsonFile(const std::filesystem::path& path);
  nlohmann::json toDiffusersJson() const;

  // From tensor names and shapes (diffusers or BFL naming, detected). Not in the
  // weights: the rotary axes, theta and eps; they come from `base` (default: FLUX.2-dev's).
  // Throws LoadError naming a missing or mis-ranked key.
  static Flux2Config fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes, const Flux2Config& base);
  static Flux2Config fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes);

  bool operator==(const Flux2Config& o) const;
  bool operator!=(const Flux2Config& o) const { return !(*this == o); }
};

}  // namespace strata::flux2
