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
  namespace lim = io::limits;
  for (const auto& [key, value, most] : {std::tuple<const char*, int64_t, int64_t>{"in_channels", inChannels, lim::kWidth},
                                         {"out_channels", outChannels, lim::kWidth},
                                         {"num_layers", numLayers, lim::kLayers},
                                         {"num_single_layers", numSingleLayers, lim::kLayers},
                                         {"attention_head_dim", attentionHeadDim, lim::kWidth},
                                         {"num_attention_heads", numAttentionHeads, lim::kHeads},
                                         {"joint_attention_dim", jointAttentionDim, lim::kWidth},
                                         {"pooled_projection_dim", pooledProjectionDim, lim::kWidth},
                                         {"axes_dims_rope (entries)", static_cast<int64_t>(axesDimsRope.size()), 8}})
    io::requireAtMost("FluxConfig", key, value, most);
  for (auto a : axesDimsRope) io::requireAtMost("FluxConfig", "an axes_dims_rope entry", a, lim::kWidth);
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
                    lim::kWidth);
  require(mlpRatio > 0, "mlp ratio must be positive");
  require(!axesDimsRope.empty(), "axes_dims_rope is empty");
  int64_t sum = 0;
  for (auto a : axesDimsRope) {
    require(a > 0 && a % 2 == 0, "axes_dims_rope entries must be even and positive");
    sum += a;
  }
  require(sum == attentionHeadDim, "axes_dims_rope " + shapeText(axesDimsRope) + " sums to " + std::to_string(sum) +
                                       ", attention_head_dim is " + std::to_string(attentionHeadDim));
}

FluxConfig FluxConfig::fluxDev() { return FluxConfig{}; }

FluxConfig FluxConfig::tiny() {
  FluxConfig c;
  c.inChannels = 64;
  c.outChannels = 64;
  c.numLayers = 2;
  c.numSingleLayers = 4;
  c.attentionHeadDim = 32;
  c.numAttentionHeads = 4;
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
  fields.read("patch_size", c.patchSize);
  fields.read("in_channels", c.inChannels);
  if (!fields.read("out_channels", c.outChannels)) c.outChannels = c.inChannels;
  fields.read("num_layers", c.numLayers);
  fields.read("num_single_layers", c.numSingleLayers);
  fields.read("attention_head_dim", c.attentionHeadDim);
  fields.read("num_attention_heads", c.numAttentionHeads);
  fields.read("joint_attention_dim", c.jointAttentionDim);
  fields.read("pooled_projection_dim", c.pooledProjectionDim);
  fields.read("guidance_embeds", c.guidanceEmbeds);
  fields.read("axes_dims_rope", c.axesDimsRope);
  c.validate();
  return c;
}

FluxConfig FluxConfig::fromDiffusersJsonFile(const std::filesystem::path& path) {
  // IoError naming the file: not a regular file, over 1 MB, nested too deep, not JSON.
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);
  try {
    return fromDiffusersJson(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

nlohmann::json FluxConfig::toDiffusersJson() const {
  nlohmann::json j;
  j["_class_name"] = "FluxTransformer2DModel";
  j["patch_size"] = patchSize;
  j["in_channels"] = inChannels;
  j["out_channels"] = outChannels;
  j["num_layers"] = numLayers;
  j["num_single_layers"] = numSingleLayers;
  j["attention_head_dim"] = attentionHeadDim;
  j["num_attention_heads"] = numAttentionHeads;
  j["joint_attention_dim"] = jointAttentionDim;
  j["pooled_projection_dim"] = pooledProjectionDim;
  j["guidance_embeds"] = guidanceEmbeds;
  j["axes_dims_rope"] = axesDimsRope;
  return j;
}

FluxConfig FluxConfig::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                  const std::vector<int64_t>& axesDimsRope) {
  const bool bfl = shapes.count("img_in.weight") > 0 || shapes.count("double_blocks.0.img_attn.qkv.weight") > 0;
  auto shapeOf = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    if (it == shapes.end())
      throw LoadError("FluxConfig: the checkpoint has no '" + key + "' (needed to detect the architecture)");
    if (it->second.size() != rank)
      throw LoadError("FluxConfig: '" + key + "' has shape " + shapeText(it->second) + ", expected rank " +
                      std::to_string(rank));
    return it->second;
  };
  // Highest block index + 1 from keys "<prefix>.<N>.".
  auto countBlocks = [&](const std::string& prefix) {
    const std::regex re("^" + prefix + "\\.([0-9]+)\\.");
    int64_t n = 0;
    std::smatch m;
    for (const auto& [key, _] : shapes)
      if (std::regex_search(key, m, re)) {
        // Bounded before it counts: "blocks.99999999999999999999." is not a number stoll takes.
        if (m[1].length() > 6)
          throw LoadError("FluxConfig: the checkpoint's key '" + key + "' has a block index beyond " +
                          std::to_string(io::limits::kLayers) + " (a corrupt header?)");
        n = std::max<int64_t>(n, std::stoll(m[1].str()) + 1);
      }
    return n;
  };

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

// ---- parameter plan ----------------------------------------------------------

FluxParamPlan fluxParamPlan(const FluxConfig& cfg) {
  cfg.validate();
  // Counted from the layout the model is built from (FluxLayout.h).
  auto unitOf = [&](FluxUnit unit, std::string id, std::string kind) {
    const std::string prefix = unit == FluxUnit::Double || unit == FluxUnit::Single ? id + "." : "";
    return nn::planUnit(std::move(id), std::move(kind), prefix, fluxUnitLayout(unit, cfg));
  };
  FluxParamPlan plan;
  plan.stem = unitOf(FluxUnit::Stem, "stem", "stem");
  for (int64_t i = 0; i < cfg.numLayers; ++i)
    plan.blocks.push_back(unitOf(FluxUnit::Double, "transformer_blocks." + std::to_string(i), "double"));
  for (int64_t i = 0; i < cfg.numSingleLayers; ++i)
    plan.blocks.push_back(unitOf(FluxUnit::Single, "single_transformer_blocks." + std::to_string(i), "single"));
  plan.head = unitOf(FluxUnit::Head, "head", "head");
  return plan;
}

}  // namespace strata::flux

namespace strata::flux {

bool isModulationLinear(const std::string& path) {
  auto endsWith = [&](const std::string& tail) {
    return path.size() >= tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
  };
  return endsWith("norm1.linear") || endsWith("norm1_context.linear") || endsWith("norm.linear") ||
         endsWith("norm_out.linear");
}

double fluxTrainStepFlops(const FluxConfig& cfg, int64_t batch, int64_t imageTokens, int64_t textTokens,
                          int64_t loraRank, const std::function<bool(const std::string&)>& hasLora) {
  auto contains = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  auto tokensOf = [&](const std::string& path) -> double {
    if (contains(path, "time_text_embed") || isModulationLinear(path)) return 1;
    if (path.rfind("single_transformer_blocks.", 0) == 0) return static_cast<double>(imageTokens + textTokens);
    if (contains(path, "context_embedder") || contains(path, "add_q_proj") || contains(path, "add_k_proj") ||
        contains(path, "add_v_proj") || contains(path, "to_add_out") || contains(path, "ff_context"))
      return static_cast<double>(textTokens);
    return static_cast<double>(imageTokens);
  };
  const auto plan = fluxParamPlan(cfg);
  double flops = 0;
  auto addUnit = [&](const FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      const double n = tokensOf(l.path) * static_cast<double>(batch);
      flops += 4.0 * n * static_cast<double>(l.inFeatures) * static_cast<double>(l.outFeatures);
      if (loraRank > 0 && hasLora && hasLora(l.path))
        flops += 6.0 * n * static_cast<double>(loraRank) * static_cast<double>(l.inFeatures + l.outFeatures);
    }
  };
  addUnit(plan.stem);
  for (const auto& b : plan.blocks) addUnit(b);
  addUnit(plan.head);
  const double seq = static_cast<double>(imageTokens + textTokens);
  flops += 12.0 * static_cast<double>(batch) * seq * seq * static_cast<double>(cfg.hiddenSize()) *
           static_cast<double>(plan.blocks.size());
  return flops;
}

}  // namespace strata::flux
