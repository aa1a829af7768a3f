#include "models/llama/LlamaConfig.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include <tuple>

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/JsonFile.h"

namespace fs = std::filesystem;

namespace strata::llama {

namespace {

// rope_parameters (transformers 5) or rope_scaling (older): same fields.
void readRope(const nlohmann::json& obj, const std::string& source, const std::string& name, LlamaConfig& c) {
  if (!obj.is_object()) throw ConfigError(source + ": key '" + name + "': expected an object, got " + obj.dump());
  const io::JsonFields r(obj, source, name + ".");
  if (r.has("rope_theta")) c.ropeTheta = r.number("rope_theta");
  // Older files spell it "type".
  const std::string type = r.has("rope_type") ? r.text("rope_type", "default") : r.text("type", "default");
  if (type == "default") {
    c.ropeScaling = RopeScaling{};
  } else if (type == "llama3") {
    c.ropeScaling.type = RopeType::Llama3;
    c.ropeScaling.factor = r.number("factor");
    c.ropeScaling.lowFreqFactor = r.number("low_freq_factor");
    c.ropeScaling.highFreqFactor = r.number("high_freq_factor");
    c.ropeScaling.originalMaxPositionEmbeddings = r.integer("original_max_position_embeddings");
  } else if (type == "linear") {
    c.ropeScaling.type = RopeType::Linear;
    c.ropeScaling.factor = r.number("factor");
  } else {
    r.fail("rope_type", "'" + type + "' is not supported (Strata runs default, llama3 and linear)");
  }
}

}  // namespace

const char* toString(RopeType type) {
  switch (type) {
    case RopeType::Llama3:
      return "llama3";
    case RopeType::Linear:
      return "linear";
    case RopeType::Default:
      break;
  }
  return "default";
}

void LlamaConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("LlamaConfig: " + what);
  };
  // Bounds first: the plan sizes a list by the layers and multiplies the widths.
  namespace lim = io::limits;
  for (const auto& [key, value, most] :
       {std::tuple<const char*, int64_t, int64_t>{"vocab_size", vocabSize, lim::kVocab},
        {"hidden_size", hiddenSize, lim::kWidth},
        {"intermediate_size", intermediateSize, lim::kWidth},
        {"num_hidden_layers", numHiddenLayers, lim::kLayers},
        {"num_attention_heads", numAttentionHeads, lim::kHeads},
        {"num_key_value_heads", numKeyValueHeads, lim::kHeads},
        {"head_dim", headDim, lim::kWidth},
        {"max_position_embeddings", maxPositionEmbeddings, lim::kPositions}})
    io::requireAtMost("LlamaConfig", key, value, most);
  if (slidingWindow) io::requireAtMost("LlamaConfig", "sliding_window", *slidingWindow, lim::kPositions);
  require(vocabSize > 0, "vocab_size must be positive");
  require(hiddenSize > 0, "hidden_size must be positive");
  require(intermediateSize > 0, "intermediate_size must be positive");
  require(numHiddenLayers > 0, "num_hidden_layers must be positive");
  require(numAttentionHeads > 0, "num_attention_heads must be positive");
  require(numKeyValueHeads > 0 && numAttentionHeads % numKeyValueHeads == 0,
          "num_key_value_heads (" + std::to_string(numKeyValueHeads) + ") must divide num_attention_heads (" +
              std::to_string(numAttentionHeads) + ")");
  require(headDim > 0 && headDim % 2 == 0, "head_dim must be even and positive, got " + std::to_string(headDim));
  require(rmsNormEps > 0, "rms_norm_eps must be positive");
  require(ropeTheta > 0, "rope_theta must be positive");
  require(maxPositionEmbeddings > 0, "max_position_embeddings must be positive");
  require(ropeScaling.factor > 0, "rope scaling factor must be positive");
  if (ropeScaling.type == RopeType::Llama3) {
    require(ropeScaling.highFreqFactor > ropeScaling.lowFreqFactor,
            "llama3 rope: high_freq_factor must exceed low_freq_factor");
    require(ropeScaling.lowFreqFactor > 0, "llama3 rope: low_freq_factor must be positive");
    require(ropeScaling.originalMaxPositionEmbeddings > 0,
            "llama3 rope: original_max_position_embeddings must be positive");
  }
  require(!slidingWindow || *slidingWindow > 0, "sliding_window must be positive");
}

LlamaConfig LlamaConfig::fromJson(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ConfigError(source + ": not a JSON object");
  if (j.contains("model_type") && j.at("model_type") == "mistral3") {
    // Mistral3ForConditionalGeneration: the language model's config is text_config
    // (transformers' default text model there is "mistral").
    if (!j.contains("text_config") || !j.at("text_config").is_object())
      throw ConfigError(source + ": key 'text_config': missing (a mistral3 config holds its language model there)");
    nlohmann::json text = j.at("text_config");
    if (!text.contains("model_type")) text["model_type"] = "mistral";
    if (text.at("model_type") != "mistral")
      throw ConfigError(source + ": key 'text_config.model_type': " + text.at("model_type").dump() +
                        " is not a language model Strata runs inside mistral3 (mistral)");
    return fromJson(text, source + ": text_config");
  }
  const io::JsonFields r(j, source);
  LlamaConfig c;
  c.modelType = r.text("model_type", "");
  if (c.modelType.empty()) r.fail("model_type", "missing (required: llama, mistral, qwen2 or qwen3)");
  if (c.modelType != "llama" && c.modelType != "mistral" && c.modelType != "qwen2" && c.modelType != "qwen3")
    r.fail("model_type", "'" + c.modelType +
                             "' is not a Llama-family model Strata runs (llama, mistral, qwen2, qwen3; "
                             "mistral3 through its text_config)");
  const std::string act = r.text("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", "'" + act + "' is not supported (the SwiGLU MLP uses silu)");

  c.vocabSize = r.integer("vocab_size");
  c.hiddenSize = r.integer("hidden_size");
  c.intermediateSize = r.integer("intermediate_size");
  c.numHiddenLayers = r.integer("num_hidden_layers");
  c.numAttentionHeads = r.integer("num_attention_heads");
  if (c.numAttentionHeads <= 0) r.fail("num_attention_heads", "must be positive");
  c.numKeyValueHeads = r.integer("num_key_value_heads", c.numAttentionHeads);
  if (c.numKeyValueHeads <= 0 || c.numAttentionHeads % c.numKeyValueHeads != 0)
    r.fail("num_key_value_heads", std::to_string(c.numKeyValueHeads) + " does not divide num_attention_heads " +
                                      std::to_string(c.numAttentionHeads));
  if (r.has("head_dim") && !j.at("head_dim").is_null()) {
    c.headDim = r.integer("head_dim");
  } else if (c.modelType == "qwen3") {
    c.headDim = 128;  // Qwen3Config's default: independent of hidden_size
  } else {
    if (c.hiddenSize % c.numAttentionHeads != 0)
      r.fail("hidden_size", std::to_string(c.hiddenSize) +
                                " is not a multiple of num_attention_heads and there is "
                                "no head_dim");
    c.headDim = c.hiddenSize / c.numAttentionHeads;
  }
  if (c.headDim <= 0 || c.headDim % 2 != 0) r.fail("head_dim", "must be even and positive");
  c.rmsNormEps = r.number("rms_norm_eps", 1e-6);
  c.maxPositionEmbeddings = r.integer("max_position_embeddings", 2048);
  c.tieWordEmbeddings = r.boolean("tie_word_embeddings", false);

  c.ropeTheta = r.number("rope_theta", 10000.0);
  if (r.has("rope_parameters"))
    readRope(j.at("rope_parameters"), source, "rope_parameters", c);
  else if (r.has("rope_scaling"))
    readRope(j.at("rope_scaling"), source, "rope_scaling", c);

  if (c.modelType == "qwen2") {
    c.qkvBias = true;  // Qwen2Attention: bias on q/k/v always, none on o
    if (r.boolean("use_sliding_window", false))
      r.fail("use_sliding_window", "true is not supported (Qwen2's per-layer sliding window)");
  } else {
    c.qkvBias = c.outputBias = r.boolean("attention_bias", false);
  }
  if (c.modelType == "qwen3") {
    c.qkNorm = true;
    // Qwen3's sliding window is per layer (layer_types); Strata runs full attention only.
    if (r.boolean("use_sliding_window", false))
      r.fail("use_sliding_window", "true is not supported (Qwen3's per-layer sliding window)");
    if (r.has("layer_types")) {
      const auto& types = j.at("layer_types");
      if (!types.is_array()) r.fail("layer_types", "expected a list, got " + types.dump());
      for (const auto& t : types)
        if (t != "full_attention")
          r.fail("layer_types", t.dump() + " is not supported (Strata runs full_attention layers only)");
    }
  }
  c.mlpBias = r.boolean("mlp_bias", false);
  if (c.modelType == "mistral" && r.has("sliding_window")) {
    c.slidingWindow = r.integer("sliding_window");
    if (*c.slidingWindow <= 0) r.fail("sliding_window", "must be positive");
  }
  if (r.has("pad_token_id")) c.padTokenId = r.integer("pad_token_id");
  if (r.has("bos_token_id")) c.bosTokenId = r.integer("bos_token_id");
  if (r.has("eos_token_id")) {
    const auto& e = j.at("eos_token_id");
    if (e.is_array()) {
      for (const auto& v : e) {
        if (!v.is_number_integer()) r.fail("eos_token_id", "expected integers, got " + v.dump());
        c.eosTokenIds.push_back(v.get<int64_t>());
      }
    } else {
      c.eosTokenIds.push_back(r.integer("eos_token_id"));
    }
  }
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
  return c;
}

LlamaConfig LlamaConfig::fromFile(const fs::path& fileOrFolder) {
  const fs::path path = fs::is_directory(fileOrFolder) ? fileOrFolder / "config.json" : fileOrFolder;
  if (!fs::exists(path))
    throw IoError(path.string() + ": no such file (a transformers model folder holds config.json)");
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);  // a config.json: 1 MB at most
  return fromJson(j, path.string());
}

nlohmann::json LlamaConfig::toJson() const {
  nlohmann::json j;
  j["model_type"] = modelType;
  j["architectures"] = {modelType == "qwen2"     ? "Qwen2ForCausalLM"
                        : modelType == "qwen3"   ? "Qwen3ForCausalLM"
                        : modelType == "mistral" ? "MistralForCausalLM"
                                                 : "LlamaForCausalLM"};
  j["hidden_act"] = "silu";
  j["vocab_size"] = vocabSize;
  j["hidden_size"] = hiddenSize;
  j["intermediate_size"] = intermediateSize;
  j["num_hidden_layers"] = numHiddenLayers;
  j["num_attention_heads"] = numAttentionHeads;
  j["num_key_value_heads"] = numKeyValueHeads;
  j["head_dim"] = headDim;
  j["rms_norm_eps"] = rmsNormEps;
  j["max_position_embeddings"] = maxPositionEmbeddings;
  j["tie_word_embeddings"] = tieWordEmbeddings;
  j["rope_theta"] = ropeTheta;
  if (ropeScaling.type == RopeType::Default) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::json s;
    s["rope_type"] = toString(ropeScaling.type);
    s["factor"] = ropeScaling.factor;
    if (ropeScaling.type == RopeType::Llama3) {
      s["low_freq_factor"] = ropeScaling.lowFreqFactor;
      s["high_freq_factor"] = ropeScaling.highFreqFactor;
      s["original_max_position_embeddings"] = ropeScaling.originalMaxPositionEmbeddings;
    }
    j["rope_scaling"] = s;
  }
  if (modelType != "qwen2") j["attention_bias"] = qkvBias;
  if (modelType == "qwen3") j["use_sliding_window"] = false;
  j["mlp_bias"] = mlpBias;
  if (modelType == "mistral") j["sliding_window"] = slidingWindow ? nlohmann::json(*slidingWindow) : nullptr;
  if (padTokenId) j["pad_token_id"] = *padTokenId;
  if (bosTokenId) j["bos_token_id"] = *bosTokenId;
  if (eosTokenIds.size() == 1)
    j["eos_token_id"] = eosTokenIds[0];
  else if (!eosTokenIds.empty())
    j["eos_token_id"] = eosTokenIds;
  return j;
}

LlamaConfig LlamaConfig::llama3_8b() {
  LlamaConfig c;
  c.vocabSize = 128256;
  c.hiddenSize = 4096;
  c.intermediateSize = 14336;
  c.numHiddenLayers = 32;
  c.numAttentionHeads = 32;
  c.numKeyValueHeads = 8;
  c.headDim = 128;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 500000.0;
  c.ropeScaling = RopeScaling{RopeType::Llama3, 8.0, 1.0, 4.0, 8192};
  c.maxPositionEmbeddings = 131072;
  c.bosTokenId = 128000;
  c.eosTokenIds = {128001};
  return c;
}

LlamaConfig LlamaConfig::tiny() {
  LlamaConfig c;
  c.vocabSize = 96;
  c.hiddenSize = 32;
  c.intermediateSize = 48;
  c.numHiddenLayers = 3;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.headDim = 8;
  c.rmsNormEps = 1e-5;
  c.maxPositionEmbeddings = 64;
  c.padTokenId = 0;
  return c;
}

std::vector<nn::ModuleSpec> llamaUnitLayout(LlamaUnit unit, const LlamaConfig& cfg) {
  using T = nn::ModuleSpec::Type;
  const int64_t d = cfg.hiddenSize;
  auto linear = [](std::string path, int64_t in, int64_t out, bool bias) {
    return nn::ModuleSpec{std::move(path), T::Linear, in, out, bias};
  };
  auto rmsNorm = [d](std::string path) { return nn::ModuleSpec{std::move(path), T::RmsNorm, d, d, false}; };
  switch (unit) {
    case LlamaUnit::Stem:
      return {{"model.embed_tokens", T::Embedding, cfg.vocabSize, d, false}};
    case LlamaUnit::Layer: {
      std::vector<nn::ModuleSpec> rows = {
          rmsNorm("input_layernorm"),
          linear("self_attn.q_proj", d, cfg.qDim(), cfg.qkvBias),
          linear("self_attn.k_proj", d, cfg.kvDim(), cfg.qkvBias),
          linear("self_attn.v_proj", d, cfg.kvDim(), cfg.qkvBias),
          linear("self_attn.o_proj", cfg.qDim(), d, cfg.outputBias),
      };
      if (cfg.qkNorm) {
        // Qwen3Attention registers them after o_proj; one weight of head_dim each.
        rows.push_back({"self_attn.q_norm", T::RmsNorm, cfg.headDim, cfg.headDim, false});
        rows.push_back({"self_attn.k_norm", T::RmsNorm, cfg.headDim, cfg.headDim, false});
      }
      rows.push_back(rmsNorm("post_attention_layernorm"));
      rows.push_back(linear("mlp.gate_proj", d, cfg.intermediateSize, cfg.mlpBias));
      rows.push_back(linear("mlp.up_proj", d, cfg.intermediateSize, cfg.mlpBias));
      rows.push_back(linear("mlp.down_proj", cfg.intermediateSize, d, cfg.mlpBias));
      return rows;
    }
    case LlamaUnit::Head: {
      std::vector<nn::ModuleSpec> head = {rmsNorm("model.norm")};
      if (!cfg.tieWordEmbeddings) head.push_back(linear("lm_head", d, cfg.vocabSize, false));
      return head;
    }
  }
  return {};
}

LlamaParamPlan llamaParamPlan(const LlamaConfig& cfg) {
  cfg.validate();
  LlamaParamPlan plan;
  plan.stem = nn::planUnit("stem", "stem", "", llamaUnitLayout(LlamaUnit::Stem, cfg));
  nn::addBlocks(plan, "model.layers.", "layer", 0, cfg.numHiddenLayers, llamaUnitLayout(LlamaUnit::Layer, cfg));
  plan.head = nn::planUnit("head", "head", "", llamaUnitLayout(LlamaUnit::Head, cfg));
  return plan;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llamaParamShapes(const LlamaConfig& cfg) {
  cfg.validate();
  auto out = nn::paramShapes("", llamaUnitLayout(LlamaUnit::Stem, cfg));
  const auto layer = llamaUnitLayout(LlamaUnit::Layer, cfg);
  for (int64_t i = 0; i < cfg.numHiddenLayers; ++i) {
    const auto shapes = nn::paramShapes("model.layers." + std::to_string(i) + ".", layer);
    out.insert(out.end(), shapes.begin(), shapes.end());
  }
  const auto head = nn::paramShapes("", llamaUnitLayout(LlamaUnit::Head, cfg));
  out.insert(out.end(), head.begin(), head.end());
  return out;
}

double llamaActivationElementsPerTokenPerHidden(const LlamaConfig& cfg) {
  const double d = static_cast<double>(cfg.hiddenSize);
  const double q = static_cast<double>(cfg.qDim());
  const double kv = static_cast<double>(cfg.kvDim());
  const double inter = static_cast<double>(cfg.intermediateSize);
  // Two RMSNorms: input, its float32 copy (2 units), the normalised result.
  const double norms = 2 * 4 * d;
  // q and k before and after the rotation, v, k and v repeated to all heads
  // for the fused kernel, the attention output (o_proj's input).
  double attention = 2 * q + 2 * kv + kv + 2 * q + q;
  // Qwen3's q/k norms: the float32 copies of q and k (2 units) and the normalised q and k.
  if (cfg.qkNorm) attention += 3 * (q + kv);
  // gate, silu(gate), up, and their product (down_proj's input).
  const double mlp = 4 * inter;
  return (norms + attention + mlp) / d;
}

}  // namespace strata::llama
