#include "models/flux/FluxConfig.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <numeric>
#include <tuple>
#include <regex>
#include <set>

#include "common/Error.h"
#include "io/JsonFields.h"
#include "common/ShapeText.h"
#include "io/FileBytes.h"
#include "io/JsonFile.h"
#include "dit/ConfigShapes.h"
#include "models/flux/FluxLayout.h"

namespace strata::flux {

namespace {

// Rotary axes when the weights do not say: FLUX's split for head dim 128,
// otherwise 1/8 for the first axis and the rest halved, all even.
std::vector<int64_t> defaultAxes(int64_t headDim) {
  if (headDim == 128) return {16, 56, 56};
  int64_t a0 = 2 * std::max<int64_t>(1, headDim / 16);
  const int64_t rest = headDim - a0;
  const int64_t a1 = 2 * (rest / 4);
  return {a0, a1, rest - a1};
}

}  // namespace

void FluxConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("FluxConfig: " + what);
  };
  // Bounds first: everything below multiplies these, and the plan sizes lists by them.
  dit::requireStackBounds("FluxConfig", dit::stackBounds(*this),
                          {{"pooled_projection_dim", pooledProjectionDim, io::limits::kWidth}}, axesDimsRope);
  require(std::isfinite(mlpRatio) && mlpRatio <= 64, "mlp ratio must be at most 64");
  require(patchSize == 1,
          "patch_size must be 1 (latents are packed 2x2 outside the model), got " + std::to_string(patchSize));
  require(inChannels > 0, "in_channels must be positive");
  require(outChannels > 0, "out_channels must be positive");
  require(numLayers >= 0 && numSingleLayers >= 0, "num_layers / num_single_layers must be >= 0");
  require(numLayers + numSingleLayers > 0, "the model needs at least one block");
  require(attentionHeadDim > 0 && attentionHeadDim % 2 == 0, "attention_head_dim must be even and positive");
  require(numAttentionHeads > 0, "num_attention_heads must be positive");
  require(jointAttentionDim > 0, "joint_attention_dim must be positive");
  require(pooledProjectionDim > 0, "pooled_projection_dim must be positive");
  io::requireAtMost("FluxConfig", "the hidden size (num_attention_heads x attention_head_dim)", hiddenSize(),
                    io::limits::kWidth);
  require(mlpRatio > 0, "mlp ratio must be positive");
  dit::requireRotaryAxes("FluxConfig", axesDimsRope, attentionHeadDim);
}

FluxConfig FluxConfig::fluxDev() { return FluxConfig{}; }

FluxConfig FluxConfig::tiny() {
  FluxConfig c;
  dit::setTinyStack(c);
  c.jointAttentionDim = 64;
  c.pooledProjectionDim = 32;
  c.guidanceEmbeds = true;
  c.axesDimsRope = {8, 12, 12};
  return c;
}

FluxConfig FluxConfig::preset(const std::string& name) {
  if (name == "flux-dev" || name == "flux1-dev" || name == "dev") return fluxDev();
  if (name == "tiny") return tiny();
  throw ConfigError("FluxConfig: unknown preset '" + name + "' (known: flux-dev, tiny)");
}

FluxConfig FluxConfig::fromDiffusersJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("FluxConfig: diffusers config is not a JSON object");
  FluxConfig c;
  c.guidanceEmbeds = false;  // diffusers' default; FLUX.1-dev's config sets it
  const io::JsonFields fields(j, "FluxConfig: diffusers config");
  dit::readStackKeys(fields, c);
  fields.read("pooled_projection_dim", c.pooledProjectionDim);
  c.validate();
  return c;
}

FluxConfig FluxConfig::fromDiffusersJsonFile(const std::filesystem::path& path) {
  return dit::configFromJsonFile<FluxConfig>(path);
}

nlohmann::json FluxConfig::toDiffusersJson() const {
  nlohmann::json j;
  j["_class_name"] = "FluxTransformer2DModel";
  dit::writeStackKeys(j, *this);
  j["pooled_projection_dim"] = pooledProjectionDim;
  return j;
}

FluxConfig FluxConfig::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                  const std::vector<int64_t>& axesDimsRope) {
  const bool bfl = shapes.count("img_in.weight") > 0 || shapes.count("double_blocks.0.img_attn.qkv.weight") > 0;
  const dit::ShapeReader read(shapes, "FluxConfig");
  auto shapeOf = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    return read.shapeOf(key, rank);
  };
  auto countBlocks = [&](const std::string& prefix) { return read.countBlocks(prefix); };

  // The keys that carry the dimensions, in each naming; one detection below.
  struct ShapeKeys {
    const char* xIn;
    const char* out;
    const char* txtIn;
    const char* pooledIn;
    const char* guidance;
    const char* doubleBlocks;
    const char* singleBlocks;
    const char* doubleNormQ;
    const char* singleNormQ;
    const char* doubleMlp;
    const char* singleMlp;
    int64_t singleMlpQkvRows;  // rows of q, k, v fused before the MLP rows, in units of hidden
  };
  static const ShapeKeys kBfl{"img_in.weight",
                              "final_layer.linear.weight",
                              "txt_in.weight",
                              "vector_in.in_layer.weight",
                              "guidance_in.in_layer.weight",
                              "double_blocks",
                              "single_blocks",
                              "double_blocks.0.img_attn.norm.query_norm.scale",
                              "single_blocks.0.norm.query_norm.scale",
                              "double_blocks.0.img_mlp.0.weight",
                              "single_blocks.0.linear1.weight",
                              3};
  static const ShapeKeys kDiffusers{"x_embedder.weight",
                                    "proj_out.weight",
                                    "context_embedder.weight",
                                    "time_text_embed.text_embedder.linear_1.weight",
                                    "time_text_embed.guidance_embedder.linear_1.weight",
                                    "transformer_blocks",
                                    "single_transformer_blocks",
                                    "transformer_blocks.0.attn.norm_q.weight",
                                    "single_transformer_blocks.0.attn.norm_q.weight",
                                    "transformer_blocks.0.ff.net.0.proj.weight",
                                    "single_transformer_blocks.0.proj_mlp.weight",
                                    0};
  const ShapeKeys& k = bfl ? kBfl : kDiffusers;

  FluxConfig c;
  const auto& xIn = shapeOf(k.xIn, 2);
  c.inChannels = xIn[1];
  const int64_t hidden = xIn[0];
  c.outChannels = shapeOf(k.out, 2)[0];
  c.jointAttentionDim = shapeOf(k.txtIn, 2)[1];
  c.pooledProjectionDim = shapeOf(k.pooledIn, 2)[1];
  c.guidanceEmbeds = shapes.count(k.guidance) > 0;
  c.numLayers = countBlocks(k.doubleBlocks);
  c.numSingleLayers = countBlocks(k.singleBlocks);
  c.attentionHeadDim = shapeOf(c.numLayers > 0 ? k.doubleNormQ : k.singleNormQ, 1)[0];
  c.numAttentionHeads = hidden / c.attentionHeadDim;
  const int64_t mlp =
      c.numLayers > 0 ? shapeOf(k.doubleMlp, 2)[0] : shapeOf(k.singleMlp, 2)[0] - k.singleMlpQkvRows * hidden;
  c.mlpRatio = static_cast<double>(mlp) / static_cast<double>(hidden);
  if (c.attentionHeadDim <= 0 || c.hiddenSize() != c.numAttentionHeads * c.attentionHeadDim)
    throw LoadError("FluxConfig: hidden size is not a multiple of the head dim " + std::to_string(c.attentionHeadDim));
  c.axesDimsRope = axesDimsRope.empty() ? defaultAxes(c.attentionHeadDim) : axesDimsRope;
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw LoadError(std::string("detected architecture is not valid: ") + e.what());
  }
  return c;
}

// FluxConfig::fromCheckpoint lives in FluxCheckpoint.cpp, next to the header reader.

bool FluxConfig::operator==(const FluxConfig& o) const {
  return patchSize == o.patchSize && inChannels == o.inChannels && outChannels == o.outChannels &&
         numLayers == o.numLayers && numSingleLayers == o.numSingleLayers && attentionHeadDim == o.attentionHeadDim &&
         numAttentionHeads == o.numAttentionHeads && jointAttentionDim == o.jointAttentionDim &&
         pooledProjectionDim == o.pooledProjectionDim && guidanceEmbeds == o.guidanceEmbeds &&
         axesDimsRope == o.axesDimsRope && ropeTheta == o.ropeTheta && mlpRatio == o.mlpRatio;
}

FluxParamPlan fluxParamPlan(const FluxConfig& cfg) {
  cfg.validate();
  // Counted from the layout the model is built from (FluxLayout.h).
  return dit::paramPlanOf(fluxLayout(cfg), cfg.numLayers, cfg.numSingleLayers);
}

}  // namespace strata::flux

namespace strata::flux {

double fluxTrainStepFlops(const FluxConfig& cfg, int64_t batch, int64_t imageTokens, int64_t textTokens,
                          int64_t loraRank, const std::function<bool(const std::string&)>& hasLora) {
  auto perSample = [](const std::string& path) {
    return path.find("time_text_embed") != std::string::npos || isModulationLinear(path);
  };
  return dit::trainStepFlops(fluxParamPlan(cfg), cfg.hiddenSize(), batch, imageTokens, textTokens, loraRank, perSample,
                             hasLora);
}

}  // namespace strata::flux
