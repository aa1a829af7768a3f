#pragma once
// The shape and options of a Llama-family causal LM (transformers LlamaForCausalLM,
// and Mistral / Qwen2 / Qwen3, which differ from it only in what this config says),
// read from the model folder's config.json. Both config forms are read: transformers
// 5's "rope_parameters" and the older "rope_theta" + "rope_scaling". A
// Mistral3ForConditionalGeneration folder (model_type "mistral3", FLUX.2-dev's text
// encoder) gives the config of its language model (text_config); its vision tower
// is not described here (LlamaCheckpoint skips its weights).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/ParamPlan.h"

namespace strata::llama {

enum class RopeType { Default, Llama3, Linear };
const char* toString(RopeType type);  // "default", "llama3", "linear"

struct RopeScaling {
  RopeType type = RopeType::Default;
  double factor = 1.0;                        // llama3, linear
  double lowFreqFactor = 1.0;                 // llama3
  double highFreqFactor = 4.0;                // llama3
  int64_t originalMaxPositionEmbeddings = 0;  // llama3
};

struct LlamaConfig {
  std::string modelType = "llama";  // "llama", "mistral", "qwen2", "qwen3"
  int64_t vocabSize = 32000;
  int64_t hiddenSize = 4096;
  int64_t intermediateSize = 11008;
  int64_t numHiddenLayers = 32;
  int64_t numAttentionHeads = 32;
  int64_t numKeyValueHeads = 32;  // < heads: grouped-query attention
  int64_t headDim = 128;          // hidden / heads unless config.json says
  double rmsNormEps = 1e-6;
  double ropeTheta = 10000.0;
  RopeScaling ropeScaling;
  int64_t maxPositionEmbeddings = 2048;
  bool tieWordEmbeddings = false;
  bool qkvBias = false;     // attention_bias (Llama), always on for Qwen2
  bool outputBias = false;  // o_proj bias: attention_bias (Llama) only
  bool mlpBias = false;     // mlp_bias (Llama)
  // Qwen3: an RMSNorm over head_dim (self_attn.q_norm / k_norm, one weight shared by
  // every head) on q and on k, per head, before the rotation.
  bool qkNorm = false;
  std::optional<int64_t> slidingWindow;  // Mistral's, when set: a query sees the last N keys
  std::optional<int64_t> padTokenId;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;

  int64_t qDim() const { return numAttentionHeads * headDim; }
  int64_t kvDim() const { return numKeyValueHeads * headDim; }

  // Throws strata::ConfigError naming the (config.json) key that is wrong.
  void validate() const;

  // From a parsed config.json. `source` (a file name) prefixes every error.
  // Throws ConfigError naming the key: a missing required key, a wrong type, a
  // model_type or hidden_act Strata does not run, a rope type it does not know.
  // model_type "mistral3" reads the language model's text_config (errors name
  // "text_config.<key>"); its vision_config is not read.
  static LlamaConfig fromJson(const nlohmann::json& j, const std::string& source = "config.json");
  // From a config.json file, or a model folder holding one. IoError when the
  // file is missing or not JSON; ConfigError (with the path) for its content.
  static LlamaConfig fromFile(const std::filesystem::path& fileOrFolder);
  nlohmann::json toJson() const;

  // Llama-3-8B's shape (the second seed's model): hidden 4096, 32 layers, 32
  // heads, 8 kv heads, intermediate 14336, vocab 128256, rope 500000 with the
  // llama3 rule (factor 8, 1/4, 8192) as Llama 3.1 has it.
  static LlamaConfig llama3_8b();
  // A few thousand parameters, same structure (GQA), for CPU tests.
  static LlamaConfig tiny();
};

// The placement units: "stem" (model.embed_tokens), "model.layers.N" (kind "layer")
// or "head" (model.norm, lm_head); ids equal nn::BlockSlot::id.
enum class LlamaUnit { Stem, Layer, Head };

// The modules of one unit as nn::ModuleSpec rows, in the order they are built and
// registered (LlamaForCausalLM builds from these rows through nn::UnitBuilder): a
// layer's paths relative to it, the stem's and head's model paths.
std::vector<nn::ModuleSpec> llamaUnitLayout(LlamaUnit unit, const LlamaConfig& cfg);

using LlamaLinearShape = nn::LinearShape;
using LlamaUnitParams = nn::UnitPlan;
using LlamaParamPlan = nn::ParamPlan;

// Per-unit parameter counts and Linear shapes counted from llamaUnitLayout (no
// model is built): equals the built model's named_parameters() exactly (a tied
// lm_head counts once, in the stem).
LlamaParamPlan llamaParamPlan(const LlamaConfig& cfg);

// Every parameter's state-dict name and shape from the config alone, in the built
// model's named_parameters() order: what a streamed load checks the file against
// before anything is built.
std::vector<std::pair<std::string, std::vector<int64_t>>> llamaParamShapes(const LlamaConfig& cfg);

// Elements kept for the backward pass by one decoder layer per token, when it
// is not checkpointed, with a frozen base (LoRA training), fused attention (no
// [L, L] scores kept) and the float32 RMSNorm copies; divided by hidden_size.
// For the 8B shape: 27.75.
double llamaActivationElementsPerTokenPerHidden(const LlamaConfig& cfg);

}  // namespace strata::llama
