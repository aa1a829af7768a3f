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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/SafetensorsCheckpoint.h"
#include "models/t5/T5Config.h"
#include "models/t5/T5Encoder.h"

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

// Opens `path`, takes the config (`config` if given, else T5Checkpoint::config()),
// builds the encoder with `options` and loads it.
std::shared_ptr<T5Encoder> loadT5Encoder(const std::filesystem::path& path, const T5BuildOptions& options = {},
                                         const std::optional<T5Config>& config = std::nullopt);

}  // namespace strata::t5
