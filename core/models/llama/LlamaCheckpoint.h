#pragma once
// Llama-family weights on disk, as transformers saves them: a folder with
// config.json and model.safetensors, or shards named by model.safetensors.index.json.
// Loading is strict: every missing, unexpected and mis-shaped key is listed (with
// the file) before anything is copied, so a bad folder never leaves a half-loaded
// model. Two kinds of key transformers also ignores are accepted and skipped:
// "*.rotary_emb.inv_freq" (older saves; Strata computes it) and "lm_head.weight"
// in a folder whose config ties it to the embeddings.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "io/SafetensorsCheckpoint.h"
#include "models/llama/LlamaForCausalLM.h"
#include "nn/Quantize.h"

namespace strata::llama {

// The weights of a model folder: model.safetensors.index.json if present, else
// model.safetensors, else the folder's only *.safetensors; or one given file.
// Throws LoadError naming the folder when there is none (and says so when only
// pickle files such as pytorch_model.bin are there: Strata does not read those).
io::SafetensorsCheckpoint openLlamaWeights(const std::filesystem::path& folderOrFile);

// Copies every parameter from `weights`, converting to each parameter's dtype and
// device. Throws LoadError naming the source and listing every problem.
void loadLlamaWeights(LlamaForCausalLM& model, const io::SafetensorsCheckpoint& weights);
void loadLlamaWeights(LlamaForCausalLM& model, const std::filesystem::path& folderOrFile);

// How streamLlamaForCausalLM treats each decoder layer once it is filled.
struct LlamaStreamOptions {
  // Quantize the layer's Linears right after it is filled (model.quantize); the
  // embeddings, the norms and lm_head stay in the build dtype.
  nn::QuantType quantize = nn::QuantType::None;
  // After each layer and once at the end: units done, units in all (layers + 1).
  std::function<void(int64_t done, int64_t total)> onProgress;
};

// Builds the model layer by layer from `weights`: the file is checked first (the
// same LoadError as loadLlamaWeights, nothing built), then each layer is built on
// its device (options.layerDevice, else options.device), filled with only its
// tensors, quantized there when asked and its file pages released before the next
// layer exists, so a quantized base is never whole in the build dtype on any device.
// Without quantization the same model as building and loadLlamaWeights.
std::shared_ptr<LlamaForCausalLM> streamLlamaForCausalLM(const io::SafetensorsCheckpoint& weights,
                                                         const LlamaConfig& cfg, LlamaBuildOptions options,
                                                         const LlamaStreamOptions& stream = {});

// Where a language model's tensors are in a file. The model's own names are always
// model.* and lm_head.* (LlamaForCausalLM.h); a Mistral3ForConditionalGeneration
// file (FLUX.2-dev's text encoder) wraps them and also holds a vision tower and a
// projector, which are recognised and skipped.
enum class LlamaKeyLayout {
  kCausalLm,        // model.*, lm_head.*  (*ForCausalLM)
  kMistral3Legacy,  // language_model.model.*, language_model.lm_head.*; vision_tower.*, multi_modal_projector.*
  kMistral3,        // model.language_model.*, lm_head.*; model.vision_tower.*, model.multi_modal_projector.*
};
const char* toString(LlamaKeyLayout layout);  // "causal_lm", "mistral3 (language_model.model.*)", ...

// The layout whose embed_tokens key the file holds. LoadError naming the weights
// when none does, or when several do.
LlamaKeyLayout detectLlamaKeyLayout(const io::SafetensorsCheckpoint& weights);
// A model parameter name -> its name in a file of `layout`.
std::string llamaFileKey(const std::string& modelKey, LlamaKeyLayout layout);
// A file key -> the model parameter name; nullopt for a key outside the language
// model's part of the file (the vision tower, a stray key).
std::optional<std::string> llamaModelKey(const std::string& fileKey, LlamaKeyLayout layout);
// Why a file key is known and deliberately not loaded in `layout` (the vision
// tower, the projector), or empty.
std::string llamaSkippedPart(const std::string& fileKey, LlamaKeyLayout layout);

// A language model read for its hidden states (a text encoder): the stem, the first
// `layers` decoder layers and model.norm, no lm_head. The file may be in any
// LlamaKeyLayout (detected); besides the keys every layout skips, the LM head and
// the decoder layers from `layers` on are skipped (the hidden states never reach
// them: the 24 B Mistral of FLUX.2-dev is read up to layer 30 of 40). Strict like
// streamLlamaForCausalLM: a missing, mis-shaped or unknown key fails the load, every
// one named with the file. The returned model's config() is `cfg` with
// numHiddenLayers = `layers` and tied embeddings (no lm_head module).
// ConfigError when `layers` is not in 1..cfg.numHiddenLayers.
std::shared_ptr<LlamaForCausalLM> streamLlamaTextModel(const io::SafetensorsCheckpoint& weights, const LlamaConfig& cfg,
                                                       int64_t layers, LlamaBuildOptions options,
                                                       const LlamaStreamOptions& stream = {});
// `cfg` as streamLlamaTextModel builds it (for random weights of the same shape).
LlamaConfig llamaTextModelConfig(const LlamaConfig& cfg, int64_t layers);

// config.json -> the model streamed in with `options` (streamLlamaForCausalLM).
std::shared_ptr<LlamaForCausalLM> loadLlamaForCausalLM(const std::filesystem::path& folder,
                                                       const LlamaBuildOptions& options = {});

// Writes config.json and the weights (named_parameters, CPU, the model dtype) as
// transformers does: model.safetensors, or shards of at most `maxShardBytes`
// (model-0000N-of-0000M.safetensors) and model.safetensors.index.json when the
// weights are larger. Every file is written atomically. Throws strata::Error, writing
// nothing, on a model with a quantized Linear (nn/QuantizedWrite.h).
void saveLlamaFolder(LlamaForCausalLM& model, const std::filesystem::path& folder, int64_t maxShardBytes = 0);

}  // namespace strata::llama
