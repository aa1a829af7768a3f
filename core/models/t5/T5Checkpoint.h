#pragma once
// T5 encoder weights as users hold them, and the one strict loader:
// - a transformers folder (diffusers' text_encoder_2/: config.json + model.safetensors,
//   or shards + model.safetensors.index.json), or a diffusers pipeline root
//   (model_index.json names the T5EncoderModel component);
// - one file, e.g. ComfyUI's t5xxl_fp16.safetensors.
// Names are transformers' (shared.weight, encoder.block.N...), under any common
// prefix (found from encoder.final_layer_norm.weight). The tied embedding may be
// stored as shared.weight, as encoder.embed_tokens.weight, or as both (then the
// copy is checked for its shape and not loaded twice).
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/SafetensorsCheckpoint.h"
#include "models/t5/T5Config.h"
#include "models/t5/T5Encoder.h"
#include "nn/Quantize.h"

namespace strata::t5 {

class T5Checkpoint {
 public:
  // Reads headers only. Throws IoError / LoadError naming the file.
  static T5Checkpoint open(const std::filesystem::path& path);

  const io::SafetensorsCheckpoint& files() const { return *files_; }
  // The prefix in front of every transformers name ("" for transformers' own files).
  const std::string& prefix() const { return prefix_; }
  // The stored name of the embedding loaded into shared.weight.
  const std::string& embeddingKey() const { return embeddingKey_; }
  // Shapes under the model's own names (prefix removed, embedding as shared.weight).
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  // config.json of the folder, empty for a single file.
  const std::filesystem::path& configJsonPath() const { return configJson_; }
  // config.json when there is one, else T5Config::fromShapes.
  T5Config config() const;

 private:
  std::shared_ptr<io::SafetensorsCheckpoint> files_;
  std::string prefix_;
  std::string embeddingKey_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::filesystem::path configJson_;
};

// Copies every parameter of `model` from `ckpt`, converting dtype and device.
// Strict: throws LoadError naming the file(s) and every missing, unexpected and
// mis-shaped key before anything is copied. Returns the keys that were known and
// left out on purpose, with why (the tied embedding copy).
std::vector<std::string> loadT5Weights(T5Encoder& model, const T5Checkpoint& ckpt);

// How streamT5Encoder treats each block once it is filled.
struct T5StreamOptions {
  // Quantize the block's Linears (q, k, v, o, wi*, wo) right after it is filled
  // (model.quantize_te); the embedding and the norms stay in the build dtype.
  nn::QuantType quantize = nn::QuantType::None;
  // After each block and once at the end: units done, units in all (blocks + 1).
  std::function<void(int64_t done, int64_t total)> onProgress;
};

// Builds the encoder block by block from `ckpt`: the file is checked first (the
// same LoadError as loadT5Weights, nothing built), then each block is built on
// options.device, filled with only its tensors, quantized there when asked and
// its file pages released before the next block exists. Without quantization the
// same model as building and loadT5Weights.
std::shared_ptr<T5Encoder> streamT5Encoder(const T5Checkpoint& ckpt, const T5Config& cfg, T5BuildOptions options,
                                           const T5StreamOptions& stream = {});

// Opens `path`, takes the config (`config` if given, else T5Checkpoint::config())
// and streams the encoder in with `options` (streamT5Encoder).
std::shared_ptr<T5Encoder> loadT5Encoder(const std::filesystem::path& path, const T5BuildOptions& options = {},
                                         const std::optional<T5Config>& config = std::nullopt,
                                         const T5StreamOptions& stream = {});

}  // namespace strata::t5
