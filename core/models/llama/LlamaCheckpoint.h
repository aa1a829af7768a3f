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
