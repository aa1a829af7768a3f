#include "models/clip/ClipTextConfig.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <tuple>

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/JsonFile.h"
#include "common/ShapeText.h"

namespace strata::clip {

namespace {

// CLIP's head width in every released text tower (ViT-B/L/H/G).
constexpr int64_t kClipHeadDim = 64;

}  // namespace

const char* toString(ClipActivation act) {
  switch (act) {
    case ClipActivation::QuickGelu:
      return "quick_gelu";
    case ClipActivation::Gelu:
      return "gelu";
    case ClipActivation::GeluTanh:
      return "gelu_new";
  }
  return "?";
}

void ClipTextConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("ClipTextConfig: " + what);
  };
  namespace lim = io::limits;
  for (const auto& [key, value, most] :
       {std::tuple<const char*, int64_t, int64_t>{"vocab_size", vocabSize, lim::kVocab},
        {"hidden_size", hiddenSize, lim::kWidth},
        {"intermediate_size", intermediateSize, lim::kWidth},
        {"num_hidden_layers", numHiddenLayers, lim::kLayers},
        {"num_attention_heads", numAttentionHeads, lim::kHeads},
        {"max_position_embeddings", maxPositionEmbeddings, lim::kPositions}})
    io::requireAtMost("ClipTextConfig", key, value, most);
  require(vocabSize > 0, "vocab_size must be positive");
  require(hiddenSize > 0, "hidden_size must be positive");
  require(intermediateSize > 0, "intermediate_size must be positive");
  require(numHiddenLayers > 0, "num_hidden_layers must be positive");
  require(numAttentionHeads > 0 && hiddenSize % numAttentionHeads == 0,
          "hidden_size " + std::to_string(hiddenSize) + " is not a multiple of num_attention_heads " +
              std::to_string(numAttentionHeads));
  require(maxPositionEmbeddings > 0, "max_position_embeddings must be positive");
  require(layerNormEps > 0, "layer_norm_eps must be positive");
}

ClipTextConfig ClipTextConfig::clipL() { return ClipTextConfig{}; }

ClipTextConfig ClipTextConfig::tiny() {
  ClipTextConfig c;
  c.vocabSize = 64;
  c.hiddenSize = 16;
  c.intermediateSize = 32;
  c.numHiddenLayers = 2;
  c.numAttentionHeads = 4;
  c.maxPositionEmbeddings = 12;
  return c;
}

ClipTextConfig ClipTextConfig::preset(const std::string& name) {
  if (name == "clip-l" || name == "clip_l" || name == "clip-vit-large-patch14") return clipL();
  if (name == "tiny") return tiny();
  throw ConfigError("ClipTextConfig: unknown preset '" + name + "' (known: clip-l, tiny)");
}

ClipTextConfig ClipTextConfig::fromTransformersJson(const nlohmann::json& jIn) {
  if (!jIn.is_object()) throw ConfigError("ClipTextConfig: transformers config is not a JSON object");
  // A full CLIPConfig nests the text tower's settings.
  const nlohmann::json& j = jIn.contains("text_config") && jIn["text_config"].is_object() ? jIn["text_config"] : jIn;
  const io::JsonFields fields(j, "ClipTextConfig: transformers config");
  std::string modelType;
  if (fields.read("model_type", modelType) && modelType != "clip_text_model" && modelType != "clip")
    throw ConfigError("ClipTextConfig: model_type is '" + modelType + "', not 'clip_text_model'");
  // transformers' CLIPTextConfig defaults, for keys a file leaves out.
  ClipTextConfig c;
  c.hiddenSize = 512;
  c.intermediateSize = 2048;
  c.numAttentionHeads = 8;
  c.eosTokenId = 49407;
  fields.read("vocab_size", c.vocabSize);
  fields.read("hidden_size", c.hiddenSize);
  fields.read("intermediate_size", c.intermediateSize);
  fields.read("num_hidden_layers", c.numHiddenLayers);
  fields.read("num_attention_heads", c.numAttentionHeads);
  fields.read("max_position_embeddings", c.maxPositionEmbeddings);
  fields.read("layer_norm_eps", c.layerNormEps);
  fields.read("eos_token_id", c.eosTokenId);
  std::string act;
  if (fields.read("hidden_act", act)) {
    if (act == "quick_gelu")
      c.hiddenAct = ClipActivation::QuickGelu;
    else if (act == "gelu")
      c.hiddenAct = ClipActivation::Gelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
      c.hiddenAct = ClipActivation::GeluTanh;
    else
      throw ConfigError("ClipTextConfig: hidden_act '" + act + "' is not supported (quick_gelu, gelu, gelu_new)");
  }
  c.validate();
  return c;
}

ClipTextConfig ClipTextConfig::fromTransformersJsonFile(const std::filesystem::path& path) {
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);  // a config.json: 1 MB at most
  try {
    return fromTransformersJson(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

nlohmann::json ClipTextConfig::toTransformersJson() const {
  nlohmann::json j;
  j["architectures"] = {"CLIPTextModel"};
  j["model_type"] = "clip_text_model";
  j["vocab_size"] = vocabSize;
  j["hidden_size"] = hiddenSize;
  j["intermediate_size"] = intermediateSize;
  j["num_hidden_layers"] = numHiddenLayers;
  j["num_attention_heads"] = numAttentionHeads;
  j["max_position_embeddings"] = maxPositionEmbeddings;
  j["hidden_act"] = toString(hiddenAct);
  j["layer_norm_eps"] = layerNormEps;
  j["eos_token_id"] = eosTokenId;
  return j;
}

ClipTextConfig ClipTextConfig::fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                          std::optional<int64_t> numAttentionHeads) {
  auto shapeOf = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    if (it == shapes.end()) throw LoadError("ClipTextConfig: the weights have no '" + key + "'");
    if (it->second.size() != rank)
      throw LoadError("ClipTextConfig: '" + key + "' has shape " + shapeText(it->second) + ", expected " +
                      std::to_string(rank) + " dimensions");
    return it->second;
  };
  ClipTextConfig c;
  const auto& tok = shapeOf("embeddings.token_embedding.weight", 2);
  c.vocabSize = tok[0];
  c.hiddenSize = tok[1];
  c.maxPositionEmbeddings = shapeOf("embeddings.position_embedding.weight", 2)[0];
  c.numHiddenLayers = 0;
  while (shapes.count("encoder.layers." + std::to_string(c.numHiddenLayers) + ".self_attn.q_proj.weight"))
    ++c.numHiddenLayers;
  if (c.numHiddenLayers == 0)
    throw LoadError("ClipTextConfig: the weights have no 'encoder.layers.0.self_attn.q_proj.weight'");
  c.intermediateSize = shapeOf("encoder.layers.0.mlp.fc1.weight", 2)[0];
  if (numAttentionHeads) {
    c.numAttentionHeads = *numAttentionHeads;
  } else {
    if (c.hiddenSize % kClipHeadDim != 0)
      throw LoadError("ClipTextConfig: the head count is not in the weights and hidden size " +
                      std::to_string(c.hiddenSize) + " is no multiple of CLIP's head width 64: give a config.json");
    c.numAttentionHeads = c.hiddenSize / kClipHeadDim;
  }
  c.validate();
  return c;
}

bool ClipTextConfig::operator==(const ClipTextConfig& o) const {
  return vocabSize == o.vocabSize && hiddenSize == o.hiddenSize && intermediateSize == o.intermediateSize &&
         numHiddenLayers == o.numHiddenLayers && numAttentionHeads == o.numAttentionHeads &&
         maxPositionEmbeddings == o.maxPositionEmbeddings && hiddenAct == o.hiddenAct &&
         layerNormEps == o.layerNormEps && eosTokenId == o.eosTokenId;
}

std::vector<nn::ModuleSpec> clipUnitLayout(ClipUnit unit, const ClipTextConfig& cfg) {
  using T = nn::ModuleSpec::Type;
  const int64_t d = cfg.hiddenSize, f = cfg.intermediateSize;
  auto linear = [](std::string path, int64_t in, int64_t out) {
    return nn::ModuleSpec{std::move(path), T::Linear, in, out, true};
  };
  auto layerNorm = [d](std::string path) { return nn::ModuleSpec{std::move(path), T::LayerNorm, d, d, true}; };
  switch (unit) {
    case ClipUnit::Stem:
      return {
          {"embeddings.token_embedding", T::Embedding, cfg.vocabSize, d, false},
          {"embeddings.position_embedding", T::Embedding, cfg.maxPositionEmbeddings, d, false},
      };
    case ClipUnit::Layer:
      return {
          linear("self_attn.k_proj", d, d), linear("self_attn.v_proj", d, d),
          linear("self_attn.q_proj", d, d), linear("self_attn.out_proj", d, d),
          layerNorm("layer_norm1"),         linear("mlp.fc1", d, f),
          linear("mlp.fc2", f, d),          layerNorm("layer_norm2"),
      };
    case ClipUnit::Head:
      return {layerNorm("final_layer_norm")};
  }
  return {};
}

ClipParamPlan clipParamPlan(const ClipTextConfig& cfg) {
  ClipParamPlan plan;
  plan.stem = nn::planUnit("stem", "stem", "", clipUnitLayout(ClipUnit::Stem, cfg));
  nn::addBlocks(plan, "encoder.layers.", "layer", 0, cfg.numHiddenLayers, clipUnitLayout(ClipUnit::Layer, cfg));
  plan.head = nn::planUnit("head", "head", "", clipUnitLayout(ClipUnit::Head, cfg));
  return plan;
}

int64_t clipEncodePeakBytes(const ClipTextConfig& cfg, int64_t batch, int64_t elementBytes) {
  cfg.validate();
  if (batch < 1 || elementBytes < 1) throw ConfigError("CLIP peak estimate: batch and element bytes must be positive");
  const double e = static_cast<double>(elementBytes);
  const double b = static_cast<double>(batch), l = static_cast<double>(cfg.maxPositionEmbeddings);
  const double scores = b * static_cast<double>(cfg.numAttentionHeads) * l * l;  // [B, H, L, L]
  const double hidden = b * l * static_cast<double>(cfg.hiddenSize);
  const double mlp = b * l * static_cast<double>(cfg.intermediateSize);
  const bool wide = elementBytes >= 4;
  // h, the norm, q, k, v; the scores, their float32 copy, the softmax, its cast.
  const double attention = 5.0 * hidden * e + scores * (e + (wide ? 0.0 : 4.0) + 4.0 + (wide ? 0.0 : e));
  // The attention locals (scores, weights, attn) alive; fc1 and its activation.
  const double mlpPeak = 8.0 * hidden * e + scores * (e + (wide ? 4.0 : e)) + 2.0 * mlp * e;
  return static_cast<int64_t>(std::llround(std::max(attention, mlpPeak)));
}

}  // namespace strata::clip
