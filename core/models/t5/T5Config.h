#pragma once
// T5Config: the shape of a T5 encoder (transformers T5EncoderModel; FLUX.1's
// text_encoder_2 is T5 v1.1 XXL). Comes from a transformers config.json, from a
// checkpoint's tensor shapes (header only) or from a preset; the parameter plan
// gives the planner per-block sizes without building the model.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nn/ParamPlan.h"

namespace strata::t5 {

// The feed-forward activation (transformers' dense_act_fn).
enum class T5Activation { Relu, GeluTanh, Gelu, Silu };
const char* toString(T5Activation act);  // "relu", "gelu_new", "gelu", "silu"

struct T5Config {
  int64_t vocabSize = 32128;                   // vocab_size
  int64_t dModel = 4096;                       // d_model
  int64_t dKv = 64;                            // d_kv: width of one head
  int64_t dFf = 10240;                         // d_ff
  int64_t numLayers = 24;                      // num_layers (encoder blocks)
  int64_t numHeads = 64;                       // num_heads
  int64_t relativeAttentionNumBuckets = 32;    // relative_attention_num_buckets
  int64_t relativeAttentionMaxDistance = 128;  // relative_attention_max_distance
  double layerNormEpsilon = 1e-6;              // layer_norm_epsilon
  // feed_forward_proj "gated-gelu" (v1.1): gated, gelu with the tanh approximation
  // ("gelu_new"); "relu" (original T5): one wi, relu.
  bool gatedAct = true;
  T5Activation activation = T5Activation::GeluTanh;

  int64_t innerDim() const { return numHeads * dKv; }
  // The feed_forward_proj text this config round-trips to ("gated-gelu", "relu", ...).
  std::string feedForwardProj() const;

  // Throws ConfigError naming the field when the shape is inconsistent.
  void validate() const;

  // Presets: "t5-xxl" (T5 v1.1 XXL, FLUX.1's text_encoder_2: 4.76 B parameters)
  // and "tiny" (same structure, a few thousand parameters, for CPU tests).
  static T5Config t5Xxl();
  static T5Config tiny();
  static T5Config preset(const std::string& name);  // throws ConfigError on an unknown name

  // From a transformers config.json object; absent keys take transformers' defaults
  // (which are T5 v1.0's: relu, d_ff 2048, ...). Throws ConfigError naming the key.
  static T5Config fromTransformersJson(const nlohmann::json& j);
  static T5Config fromTransformersJsonFile(const std::filesystem::path& path);
  nlohmann::json toTransformersJson() const;

  // From tensor names and shapes, transformers naming with no prefix (see
  // T5Checkpoint for prefixes). The max distance and the activation are not in
  // the weights: 128 and gelu_new (gated) / relu (not gated), T5's values.
  // Throws LoadError naming a missing or inconsistent key.
  static T5Config fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes);

  bool operator==(const T5Config& o) const;
  bool operator!=(const T5Config& o) const { return !(*this == o); }
};

// The placement units: "stem" (the shared embedding), "encoder.block.N" (kind
// "layer"; block 0 also holds the relative position bias table), "head"
// (final_layer_norm). Ids equal nn::BlockSlot::id of T5Encoder::blockList().
enum class T5Unit { Stem, FirstBlock, Block, Head };

// The modules of one unit as nn::ModuleSpec rows in the order T5Encoder builds and
// registers them (through nn::UnitBuilder): a block's paths relative to it, the
// stem's and head's model paths. T5 v1.1 has no biases.
std::vector<nn::ModuleSpec> t5UnitLayout(T5Unit unit, const T5Config& cfg);

using T5BlockParams = nn::UnitPlan;
using T5ParamPlan = nn::ParamPlan;

// Counted from t5UnitLayout (pure; nothing is built). Equals the built model's
// named_parameters() exactly.
T5ParamPlan t5ParamPlan(const T5Config& cfg);

// The encoder blocks' Linears (q, k, v, o, wi / wi_0, wi_1, wo): what
// model.quantize_te stores in 1 byte. weights: their parameter count; rows: their
// output rows (one scale each per row); count: how many; largest: the most
// weights in one (its converted copy lives while its matmul runs).
struct T5LinearCounts {
  int64_t weights = 0;
  int64_t rows = 0;
  int64_t count = 0;
  int64_t largest = 0;
};
T5LinearCounts t5LinearCounts(const T5Config& cfg);

// Bytes of activations alive at the peak of one encoder call without autograd
// ([batch, length] token ids, activations and weights `elementBytes` wide), from
// the order T5Block::forward makes and frees its tensors: the position bias kept
// for every block, the scores with their float32 copy and softmax, the gated
// feed-forward's four [B, L, d_ff] tensors. T5-XXL bf16, 512 tokens, on an H200:
// measured 0.29 GB (batch 1) and 0.97 GB (batch 4) above the weights.
int64_t t5EncodePeakBytes(const T5Config& cfg, int64_t batch, int64_t length, int64_t elementBytes);

}  // namespace strata::t5
