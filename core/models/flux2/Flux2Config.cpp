#include "models/flux2/Flux2Config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <tuple>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "io/FileBytes.h"
#include "io/JsonFile.h"
#include "dit/ConfigShapes.h"
#include "io/JsonFields.h"

namespace strata::flux2 {

void Flux2Config::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("Flux2Config: " + what);
  };
  // Bounds first: everything below multiplies these, and the plan sizes lists by them.
  dit::requireStackBounds("Flux2Config", dit::stackBounds(*this),
                          {{"timestep_guidance_channels", timestepGuidanceChannels, io::limits::kWidth}}, axesDimsRope);
  require(std::isfinite(mlpRatio) && mlpRatio <= 64, "mlp_ratio must be at most 64, got " + std::to_string(mlpRatio));
  require(patchSize == 1,
          "patch_size must be 1 (latents are patchified 2x2 outside the model), got " + std::to_string(patchSize));
  require(inChannels > 0, "in_channels must be positive, got " + std::to_string(inChannels));
  require(outChannels > 0, "out_channels must be positive, got " + std::to_string(outChannels));
  require(numLayers >= 0, "num_layers must be >= 0, got " + std::to_string(numLayers));
  require(numSingleLayers >= 0, "num_single_layers must be >= 0, got " + std::to_string(numSingleLayers));
  require(numLayers + numSingleLayers > 0, "num_layers + num_single_layers: the model needs at least one block");
  require(attentionHeadDim > 0 && attentionHeadDim % 2 == 0,
          "attention_head_dim must be even and positive, got " + std::to_string(attentionHeadDim));
  require(numAttentionHeads > 0, "num_attention_heads must be positive, got " + std::to_string(numAttentionHeads));
  require(jointAttentionDim > 0, "joint_attention_dim must be positive, got " + std::to_string(jointAttentionDim));
  require(timestepGuidanceChannels > 0 && timestepGuidanceChannels % 2 == 0,
          "timestep_guidance_channels must be even and positive, got " + std::to_string(timestepGuidanceChannels));
  io::requireAtMost("Flux2Config", "the hidden size (num_attention_heads x attention_head_dim)",
                    numAttentionHeads * attentionHeadDim, io::limits::kWidth);
  require(mlpRatio > 0 && mlpHiddenSize() > 0, "mlp_ratio must be positive, got " + std::to_string(mlpRatio));
  require(ropeTheta > 0, "rope_theta must be positive, got " + std::to_string(ropeTheta));
  require(eps > 0, "eps must be positive, got " + std::to_string(eps));
  dit::requireRotaryAxes("Flux2Config", axesDimsRope, attentionHeadDim);
}

// diffusers' Flux2Transformer2DModel.__init__ defaults (models/transformers/transformer_flux2.py)
// are FLUX.2-dev's transformer: patch_size 1, in_channels 128, out_channels None, num_layers 8,
// num_single_layers 48, attention_head_dim 128, num_attention_heads 48 (hidden 6144),
// joint_attention_dim 15360, timestep_guidance_channels 256, mlp_ratio 3.0,
// axes_dims_rope (32, 32, 32, 32), rope_theta 2000, eps 1e-6; FLUX.2-dev embeds guidance.
Flux2Config Flux2Config::flux2Dev() { return Flux2Config{}; }

// FLUX.2 [klein] (black-forest-labs/FLUX.2-klein-*B transformer/config.json): the
// dev block with fewer, narrower blocks; text width 3 x the Qwen3 hidden size
// (Qwen3-8B: 4096, Qwen3-4B: 2560); no guidance embedding.
Flux2Config Flux2Config::klein9b() {
  Flux2Config c;
  c.numLayers = 8;
  c.numSingleLayers = 24;
  c.numAttentionHeads = 32;  // hidden 4096
  c.jointAttentionDim = 12288;
  c.guidanceEmbeds = false;
  return c;
}

Flux2Config Flux2Config::klein4b() {
  Flux2Config c;
  c.numLayers = 5;
  c.numSingleLayers = 20;
  c.numAttentionHeads = 24;  // hidden 3072
  c.jointAttentionDim = 7680;
  c.guidanceEmbeds = false;
  return c;
}

Flux2Config Flux2Config::tiny() {
  Flux2Config c;
  dit::setTinyStack(c);
  c.jointAttentionDim = 96;
  c.axesDimsRope = {8, 8, 8, 8};
  return c;
}

std::vector<std::string> Flux2Config::presetNames() {
  return {"flux2-dev", "flux2-klein-9b", "flux2-klein-4b", "tiny"};
}

Flux2Config Flux2Config::preset(const std::string& name) {
  if (name == "flux2-dev" || name == "flux.2-dev") return flux2Dev();
  if (name == "flux2-klein-9b") return klein9b();
  if (name == "flux2-klein-4b") return klein4b();
  if (name == "tiny") return tiny();
  std::string known;
  for (const auto& n : presetNames()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("Flux2Config: unknown preset '" + name + "' (known: " + known + ")");
}

Flux2Config Flux2Config::fromDiffusersJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("Flux2Config: diffusers config is not a JSON object");
  Flux2Config c;
  const io::JsonFields fields(j, "Flux2Config: diffusers config");
  dit::readStackKeys(fields, c);
  fields.read("timestep_guidance_channels", c.timestepGuidanceChannels);
  fields.read("mlp_ratio", c.mlpRatio);
  fields.read("rope_theta", c.ropeTheta);
  fields.read("eps", c.eps);
  c.validate();
  return c;
}

Flux2Config Flux2Config::fromDiffusersJsonFile(const std::filesystem::path& path) {
  return dit::configFromJsonFile<Flux2Config>(path);
}

nlohmann::json Flux2Config::toDiffusersJson() const {
  nlohmann::json j;
  j["_class_name"] = "Flux2Transformer2DModel";
  dit::writeStackKeys(j, *this);
  j["timestep_guidance_channels"] = timestepGuidanceChannels;
  j["mlp_ratio"] = mlpRatio;
  j["rope_theta"] = ropeTheta;
  j["eps"] = eps;
  return j;
}

Flux2Config Flux2Config::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                    const Flux2Config& base) {
  const bool bfl = shapes.count("img_in.weight") > 0;
  const dit::ShapeReader read(shapes, "Flux2Config");
  auto shapeOf = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    return read.shapeOf(key, rank);
  };
  auto countBlocks = [&](const std::string& prefix) { return read.countBlocks(prefix); };
  Flux2Config c = base;
  const auto& xIn = shapeOf(bfl ? "img_in.weight" : "x_embedder.weight", 2);  // [hidden, in]
  const int64_t hidden = xIn[0];
  c.inChannels = xIn[1];
  c.outChannels = shapeOf(bfl ? "final_layer.linear.weight" : "proj_out.weight", 2)[0];
  c.jointAttentionDim = shapeOf(bfl ? "txt_in.weight" : "context_embedder.weight", 2)[1];
  c.timestepGuidanceChannels =
      shapeOf(bfl ? "time_in.in_layer.weight" : "time_guidance_embed.timestep_embedder.linear_1.weight", 2)[1];
  c.guidanceEmbeds =
      shapes.count(bfl ? "guidance_in.in_layer.weight" : "time_guidance_embed.guidance_embedder.linear_1.weight") > 0;
  c.numLayers = countBlocks(bfl ? "double_blocks" : "transformer_blocks");
  c.numSingleLayers = countBlocks(bfl ? "single_blocks" : "single_transformer_blocks");
  const std::string normQ =
      c.numLayers > 0
          ? (bfl ? "double_blocks.0.img_attn.norm.query_norm.scale" : "transformer_blocks.0.attn.norm_q.weight")
          : (bfl ? "single_blocks.0.norm.query_norm.scale" : "single_transformer_blocks.0.attn.norm_q.weight");
  c.attentionHeadDim = shapeOf(normQ, 1)[0];
  if (c.attentionHeadDim <= 0 || hidden % c.attentionHeadDim != 0)
    throw LoadError("Flux2Config: hidden size " + std::to_string(hidden) + " is not a multiple of the head dim " +
                    std::to_string(c.attentionHeadDim));
  c.numAttentionHeads = hidden / c.attentionHeadDim;
  // The SwiGLU hidden width: the MLP-out input of a double block, else a single block's
  // output projection input minus the attention width.
  const int64_t mlp =
      c.numLayers > 0
          ? shapeOf(bfl ? "double_blocks.0.img_mlp.2.weight" : "transformer_blocks.0.ff.linear_out.weight", 2)[1]
          : shapeOf(bfl ? "single_blocks.0.linear2.weight" : "single_transformer_blocks.0.attn.to_out.weight", 2)[1] -
                hidden;
  // The base's ratio when it gives this width (3.7 and 118 / 32 both give 118 rows), else the width's own.
  // Else width / hidden, nudged half a row up where int() would round it down.
  if (static_cast<int64_t>(static_cast<double>(hidden) * base.mlpRatio) != mlp) {
    c.mlpRatio = static_cast<double>(mlp) / static_cast<double>(hidden);
    if (c.mlpHiddenSize() != mlp) c.mlpRatio = (static_cast<double>(mlp) + 0.5) / static_cast<double>(hidden);
  }
  if (c.mlpHiddenSize() != mlp)  // int(hidden * ratio) must give the width back
    throw LoadError("Flux2Config: MLP width " + std::to_string(mlp) + " is not int(hidden x ratio) for hidden " +
                    std::to_string(hidden));
  if (c.axesDimsRope.empty() || [&] {
        int64_t s = 0;
        for (auto a : c.axesDimsRope) s += a;
        return s != c.attentionHeadDim;
      }()) {
    // The base's axes do not fit this head dim: an even four-way split, as FLUX.2 uses.
    const int64_t quarter = c.attentionHeadDim / 4;
    if (quarter % 2 == 0 && quarter * 4 == c.attentionHeadDim) c.axesDimsRope = {quarter, quarter, quarter, quarter};
  }
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw LoadError(std::string("detected FLUX.2 architecture is not valid: ") + e.what());
  }
  return c;
}

Flux2Config Flux2Config::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes) {
  return fromShapes(shapes, Flux2Config{});
}

bool Flux2Config::operator==(const Flux2Config& o) const {
  return patchSize == o.patchSize && inChannels == o.inChannels && outChannels == o.outChannels &&
         numLayers == o.numLayers && numSingleLayers == o.numSingleLayers && attentionHeadDim == o.attentionHeadDim &&
         numAttentionHeads == o.numAttentionHeads && jointAttentionDim == o.jointAttentionDim &&
         timestepGuidanceChannels == o.timestepGuidanceChannels && mlpRatio == o.mlpRatio &&
         axesDimsRope == o.axesDimsRope && ropeTheta == o.ropeTheta && eps == o.eps &&
         guidanceEmbeds == o.guidanceEmbeds;
}

}  // namespace strata::flux2
