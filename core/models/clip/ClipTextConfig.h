#pragma once
// ClipTextConfig: the shape of a CLIP text encoder (transformers CLIPTextModel;
// FLUX.1's text_encoder is OpenAI's CLIP ViT-L/14 text tower). Comes from a
// transformers config.json, from a checkpoint's tensor shapes or from a preset.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nn/ParamPlan.h"

namespace strata::clip {

enum class ClipActivation { QuickGelu, Gelu, GeluTanh };
const char* toString(ClipActivation act);  // "quick_gelu", "gelu", "gelu_new"

struct ClipTextConfig {
  int64_t vocabSize = 49408;                             // vocab_size
  int64_t hiddenSize = 768;                              // hidden_size
  int64_t intermediateSize = 3072;                       // intermediate_size
  int64_t numHiddenLayers = 12;                          // num_hidden_layers
  int64_t numAttentionHeads = 12;                        // num_attention_heads
  int64_t maxPositionEmbeddings = 77;                    // max_position_embeddings
  ClipActivation hiddenAct = ClipActivation::QuickGelu;  // hidden_act
  double layerNormEps = 1e-5;                            // layer_norm_eps
  // eos_token_id decides the pooled position, as in transformers: 2 (the legacy
  // value in CLIP-L's config, FLUX's) -> argmax(input_ids), which is the
  // end-of-text token where it has the highest id; anything else -> the first
  // position holding eos_token_id.
  int64_t eosTokenId = 2;

  int64_t headDim() const { return hiddenSize / numAttentionHeads; }
  bool legacyArgmaxPooling() const { return eosTokenId == 2; }

  // Throws ConfigError naming the field when the shape is inconsistent.
  void validate() const;

  // Presets: "clip-l" (CLIP ViT-L/14 text, FLUX.1's text_encoder: 123 M parameters)
  // and "tiny" (same structure, for CPU tests).
  static ClipTextConfig clipL();
  static ClipTextConfig tiny();
  static ClipTextConfig preset(const std::string& name);  // throws ConfigError on an unknown name

  // From a transformers config.json object (a CLIPTextConfig, or a CLIPConfig whose
  // "text_config" is used); absent keys take transformers' defaults.
  static ClipTextConfig fromTransformersJson(const nlohmann::json& j);
  static ClipTextConfig fromTransformersJsonFile(const std::filesystem::path& path);
  nlohmann::json toTransformersJson() const;

  // From tensor names and shapes (transformers names, no prefix). The head count
  // is not in the weights: CLIP's head width 64 gives it (hidden 768 -> 12); a
  // hidden size that is no multiple of 64 needs a config.json. The activation and
  // eos id are CLIP-L's (quick_gelu, 2). `numAttentionHeads` given: that head
  // count instead (model.clip_num_attention_heads). Throws LoadError naming the key.
  static ClipTextConfig fromShapes(const std::map<std::string, std::vector<int64_t>>& shapes,
                                   std::optional<int64_t> numAttentionHeads = std::nullopt);

  bool operator==(const ClipTextConfig& o) const;
  bool operator!=(const ClipTextConfig& o) const { return !(*this == o); }
};

// The placement units: "stem" (token + position embeddings), "encoder.layers.N"
// (kind "layer"), "head" (final_layer_norm).
enum class ClipUnit { Stem, Layer, Head };

// The modules of one unit as nn::ModuleSpec rows in the order ClipTextModel builds
// and registers them (through nn::UnitBuilder): a layer's paths relative to it, the
// stem's and head's model paths.
std::vector<nn::ModuleSpec> clipUnitLayout(ClipUnit unit, const ClipTextConfig& cfg);

using ClipBlockParams = nn::UnitPlan;
using ClipParamPlan = nn::ParamPlan;

// Counted from clipUnitLayout (pure); equals the built model.
ClipParamPlan clipParamPlan(const ClipTextConfig& cfg);

// Bytes of activations alive at the peak of one text-model call without autograd
// ([batch, max_position_embeddings] ids, activations `elementBytes` wide), from the
// order ClipEncoderLayer::forward makes and frees its tensors (scores with their
// float32 copy and softmax, the MLP's two [B, L, intermediate] tensors).
int64_t clipEncodePeakBytes(const ClipTextConfig& cfg, int64_t batch, int64_t elementBytes);

}  // namespace strata::clip
