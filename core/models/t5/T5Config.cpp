#include "models/t5/T5Config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include <tuple>

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/JsonFile.h"
#include "common/ShapeText.h"

namespace strata::t5 {

namespace {

T5Activation activationFromName(const std::string& name, const std::string& where) {
  if (name == "relu") return T5Activation::Relu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return T5Activation::GeluTanh;
  if (name == "gelu") return T5Activation::Gelu;
  if (name == "silu" || name == "swish") return T5Activation::Silu;
  throw ConfigError("T5Config: " + where + ": activation '" + name + "' is not supported (relu, gelu_new, gelu, silu)");
}

}  // namespace

const char* toString(T5Activation act) {
  switch (act) {
    case T5Activation::Relu:
      return "relu";
    case T5Activation::GeluTanh:
      return "gelu_new";
    case T5Activation::Gelu:
      return "gelu";
    case T5Activation::Silu:
      return "silu";
  }
  return "?";
}

std::string T5Config::feedForwardProj() const {
  // transformers spells v1.1's "gated-gelu" and maps it to gelu_new.
  if (gatedAct && activation == T5Activation::GeluTanh) return "gated-gelu";
  return std::string(gatedAct ? "gated-" : "") + toString(activation);
}

void T5Config::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("T5Config: " + what);
  };
  namespace lim = io::limits;
  for (const auto& [key, value, most] :
       {std::tuple<const char*, int64_t, int64_t>{"vocab_size", vocabSize, lim::kVocab},
        {"d_model", dModel, lim::kWidth},
        {"d_kv", dKv, lim::kWidth},
        {"d_ff", dFf, lim::kWidth},
        {"num_layers", numLayers, lim::kLayers},
        {"num_heads", numHeads, lim::kHeads},
        {"relative_attention_num_buckets", relativeAttentionNumBuckets, lim::kPositions},
        {"relative_attention_max_distance", relativeAttentionMaxDistance, lim::kPositions}})
    io::requireAtMost("T5Config", key, value, most);
  require(vocabSize > 0, "vocab_size must be positive");
  require(dModel > 0, "d_model must be positive");
  require(dKv > 0, "d_kv must be positive");
  require(dFf > 0, "d_ff must be positive");
  require(numLayers > 0, "num_layers must be positive");
  require(numHeads > 0, "num_heads must be positive");
  require(relativeAttentionNumBuckets >= 4, "relative_attention_num_buckets must be at least 4");
  require(relativeAttentionMaxDistance > relativeAttentionNumBuckets / 4,
          "relative_attention_max_distance must exceed a quarter of the buckets (the exact range)");
  require(layerNormEpsilon > 0, "layer_norm_epsilon must be positive");
}

T5Config T5Config::t5Xxl() { return T5Config{}; }

T5Config T5Config::tiny() {
  T5Config c;
  c.vocabSize = 64;
  c.dModel = 16;
  c.dKv = 4;
  c.dFf = 32;
  c.numLayers = 2;
  c.numHeads = 4;
  c.relativeAttentionNumBuckets = 8;
  c.relativeAttentionMaxDistance = 16;
  return c;
}

T5Config T5Config::preset(const std::string& name) {
  if (name == "t5-xxl" || name == "t5xxl" || name == "t5-v1_1-xxl") return t5Xxl();
  if (name == "tiny") return tiny();
  throw ConfigError("T5Config: unknown preset '" + name + "' (known: t5-xxl, tiny)");
}

T5Config T5Config::fromTransformersJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("T5Config: transformers config is not a JSON object");
  const io::JsonFields fields(j, "T5Config: transformers config");
  std::string modelType;
  if (fields.read("model_type", modelType) && modelType != "t5")
    throw ConfigError("T5Config: model_type is '" + modelType + "', not 't5'");
  bool isDecoder = false;
  if (fields.read("is_decoder", isDecoder) && isDecoder)
    throw ConfigError("T5Config: is_decoder is true; this is an encoder");
  // transformers' T5Config defaults (T5 v1.0 small), for keys a file leaves out.
  T5Config c;
  c.vocabSize = 32128;
  c.dModel = 512;
  c.dKv = 64;
  c.dFf = 2048;
  c.numLayers = 6;
  c.numHeads = 8;
  fields.read("vocab_size", c.vocabSize);
  fields.read("d_model", c.dModel);
  fields.read("d_kv", c.dKv);
  fields.read("d_ff", c.dFf);
  fields.read("num_layers", c.numLayers);
  fields.read("num_heads", c.numHeads);
  fields.read("relative_attention_num_buckets", c.relativeAttentionNumBuckets);
  fields.read("relative_attention_max_distance", c.relativeAttentionMaxDistance);
  fields.read("layer_norm_epsilon", c.layerNormEpsilon);
  std::string proj = "relu";
  fields.read("feed_forward_proj", proj);
  // transformers: "gated-X" or "X"; dense_act_fn is derived from it, "gated-gelu" -> gelu_new.
  const auto dash = proj.find('-');
  const std::string head = dash == std::string::npos ? "" : proj.substr(0, dash);
  const std::string act = dash == std::string::npos ? proj : proj.substr(dash + 1);
  if ((dash != std::string::npos && head != "gated") || act.empty() || act.find('-') != std::string::npos)
    throw ConfigError("T5Config: feed_forward_proj '" + proj + "' is not 'gated-{ACT}' or '{ACT}'");
  c.gatedAct = head == "gated";
  c.activation = proj == "gated-gelu" ? T5Activation::GeluTanh : activationFromName(act, "feed_forward_proj");
  c.validate();
  return c;
}

T5Config T5Config::fromTransformersJsonFile(const std::filesystem::path& path) {
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);  // a config.json: 1 MB at most
  try {
    return fromTransformersJson(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

nlohmann::json T5Config::toTransformersJson() const {
  nlohmann::json j;
  j["architectures"] = {"T5EncoderModel"};
  j["model_type"] = "t5";
  j["vocab_size"] = vocabSize;
  j["d_model"] = dModel;
  j["d_kv"] = dKv;
  j["d_ff"] = dFf;
  j["num_layers"] = numLayers;
  j["num_heads"] = numHeads;
  j["relative_attention_num_buckets"] = relativeAttentionNumBuckets;
  j["relative_attention_max_distance"] = relativeAttentionMaxDistance;
  j["layer_norm_epsilon"] = layerNormEpsilon;
  j["feed_forward_proj"] = feedForwardProj();
  j["dense_act_fn"] = toString(activation);
  j["is_gated_act"] = gatedAct;
  return j;
}

T5Config T5Config::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes) {
  auto shapeOf = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    if (it == shapes.end()) throw LoadError("T5Config: the weights have no '" + key + "'");
    if (it->second.size() != rank)
      throw LoadError("T5Config: '" + key + "' has shape " + shapeText(it->second) + ", expected " +
                      std::to_string(rank) + " dimensions");
    return it->second;
  };
  T5Config c;
  // The tied embedding is stored as shared.weight or as encoder.embed_tokens.weight.
  const std::string embed = shapes.count("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  const auto& e = shapeOf(embed, 2);
  c.vocabSize = e[0];
  c.dModel = e[1];
  c.numLayers = 0;
  while (shapes.count("encoder.block." + std::to_string(c.numLayers) + ".layer.0.SelfAttention.q.weight"))
    ++c.numLayers;
  if (c.numLayers == 0)
    throw LoadError("T5Config: the weights have no 'encoder.block.0.layer.0.SelfAttention.q.weight'");
  const auto& bias = shapeOf("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 2);
  c.relativeAttentionNumBuckets = bias[0];
  c.numHeads = bias[1];
  const auto& q = shapeOf("encoder.block.0.layer.0.SelfAttention.q.weight", 2);
  if (q[0] % c.numHeads != 0)
    throw LoadError("T5Config: q.weight rows " + std::to_string(q[0]) + " are not a multiple of the " +
                    std::to_string(c.numHeads) + " heads of relative_attention_bias.weight");
  c.dKv = q[0] / c.numHeads;
  const std::string ff = "encoder.block.0.layer.1.DenseReluDense.";
  c.gatedAct = shapes.count(ff + "wi_0.weight") > 0;
  c.activation = c.gatedAct ? T5Activation::GeluTanh : T5Activation::Relu;
  c.dFf = shapeOf(ff + (c.gatedAct ? "wi_0.weight" : "wi.weight"), 2)[0];
  c.validate();
  return c;
}

bool T5Config::operator==(const T5Config& o) const {
  return vocabSize == o.vocabSize && dModel == o.dModel && dKv == o.dKv && dFf == o.dFf && numLayers == o.numLayers &&
         numHeads == o.numHeads && relativeAttentionNumBuckets == o.relativeAttentionNumBuckets &&
         relativeAttentionMaxDistance == o.relativeAttentionMaxDistance && layerNormEpsilon == o.layerNormEpsilon &&
         gatedAct == o.gatedAct && activation == o.activation;
}

std::vector<nn::ModuleSpec> t5UnitLayout(T5Unit unit, const T5Config& cfg) {
  using T = nn::ModuleSpec::Type;
  const int64_t d = cfg.dModel;
  const int64_t inner = cfg.innerDim();
  auto linear = [](std::string path, int64_t in, int64_t out) {
    return nn::ModuleSpec{std::move(path), T::Linear, in, out, false};
  };
  auto rmsNorm = [d](std::string path) { return nn::ModuleSpec{std::move(path), T::RmsNorm, d, d, false}; };
  switch (unit) {
    case T5Unit::Stem:
      return {{"shared", T::Embedding, cfg.vocabSize, d, false}};
    case T5Unit::FirstBlock:
    case T5Unit::Block: {
      std::vector<nn::ModuleSpec> rows = {
          linear("layer.0.SelfAttention.q", d, inner),
          linear("layer.0.SelfAttention.k", d, inner),
          linear("layer.0.SelfAttention.v", d, inner),
          linear("layer.0.SelfAttention.o", inner, d),
      };
      if (unit == T5Unit::FirstBlock)  // only block 0 holds the bias table
        rows.push_back({"layer.0.SelfAttention.relative_attention_bias", T::Embedding, cfg.relativeAttentionNumBuckets,
                        cfg.numHeads, false});
      rows.push_back(rmsNorm("layer.0.layer_norm"));
      if (cfg.gatedAct) {
        rows.push_back(linear("layer.1.DenseReluDense.wi_0", d, cfg.dFf));
        rows.push_back(linear("layer.1.DenseReluDense.wi_1", d, cfg.dFf));
      } else {
        rows.push_back(linear("layer.1.DenseReluDense.wi", d, cfg.dFf));
      }
      rows.push_back(linear("layer.1.DenseReluDense.wo", cfg.dFf, d));
      rows.push_back(rmsNorm("layer.1.layer_norm"));
      return rows;
    }
    case T5Unit::Head:
      return {rmsNorm("encoder.final_layer_norm")};
  }
  return {};
}

T5ParamPlan t5ParamPlan(const T5Config& cfg) {
  T5ParamPlan plan;
  plan.stem = nn::planUnit("stem", "stem", "", t5UnitLayout(T5Unit::Stem, cfg));
  // Block 0 holds the position-bias table.
  nn::addBlocks(plan, "encoder.block.", "layer", 0, std::min<int64_t>(cfg.numLayers, 1),
                t5UnitLayout(T5Unit::FirstBlock, cfg));
  nn::addBlocks(plan, "encoder.block.", "layer", 1, cfg.numLayers - 1, t5UnitLayout(T5Unit::Block, cfg));
  plan.head = nn::planUnit("head", "head", "", t5UnitLayout(T5Unit::Head, cfg));
  return plan;
}

T5LinearCounts t5LinearCounts(const T5Config& cfg) {
  const int64_t d = cfg.dModel, inner = cfg.innerDim(), ff = cfg.dFf;
  const int64_t wis = cfg.gatedAct ? 2 : 1;
  T5LinearCounts c;
  c.weights = cfg.numLayers * (4 * d * inner + (wis + 1) * d * ff);
  c.rows = cfg.numLayers * (3 * inner + d + wis * ff + d);
  c.count = cfg.numLayers * (4 + wis + 1);
  c.largest = std::max(d * inner, d * ff);
  return c;
}

int64_t t5EncodePeakBytes(const T5Config& cfg, int64_t batch, int64_t length, int64_t elementBytes) {
  cfg.validate();
  if (batch < 1 || length < 1 || elementBytes < 1)
    throw ConfigError("T5 peak estimate: batch, length and element bytes must be positive");
  const double e = static_cast<double>(elementBytes);
  const double b = static_cast<double>(batch), l = static_cast<double>(length);
  const double bias = static_cast<double>(cfg.numHeads) * l * l;  // [1, H, L, L], kept across blocks
  const double scores = b * bias;                                 // [B, H, L, L]
  const double model = b * l * static_cast<double>(cfg.dModel);
  const double inner = b * l * static_cast<double>(cfg.innerDim());
  const double ff = b * l * static_cast<double>(cfg.dFf);
  const bool wide = elementBytes >= 4;  // .to(float32) is then the tensor itself
  // Softmax: the scores, their float32 copy, the softmax and its cast back.
  const double softmax = scores * (e + (wide ? 0.0 : 4.0) + 4.0 + (wide ? 0.0 : e));
  const double attention = bias * e + (2.0 * model + 3.0 * inner) * e + softmax;
  // Feed-forward: scores and weights are locals still alive; act(wi_0 y) * wi_1 y.
  const double feedForward = bias * e + (3.0 * model + 4.0 * inner) * e + scores * (e + (wide ? 4.0 : e)) +
                             (cfg.gatedAct ? 4.0 : 2.0) * ff * e;
  return static_cast<int64_t>(std::llround(std::max(attention, feedForward)));
}

}  // namespace strata::t5
