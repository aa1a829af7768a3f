#pragma once
// CLIP text encoder weights as users hold them, and the one strict loader:
// - a transformers folder (diffusers' text_encoder/: config.json + model.safetensors,
//   sharded or not), or a diffusers pipeline root (model_index.json names the
//   CLIPTextModel component);
// - one file, e.g. ComfyUI's clip_l.safetensors.
// Names are transformers', with or without "text_model." (transformers 4 writes
// it, transformers 5 does not) or under any longer prefix, found from
// final_layer_norm.weight next to embeddings.token_embedding.weight. Keys that
// CLIPTextModel does not use but real files carry are accepted and reported:
// embeddings.position_ids (an old persistent buffer), text_projection.weight and
// logit_scale (heads of the full CLIP model).
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/SafetensorsCheckpoint.h"
#include "models/clip/ClipTextConfig.h"
#include "models/clip/ClipTextModel.h"

namespace strata::clip {

class ClipCheckpoint {
 public:
  // Reads headers only. Throws IoError / LoadError naming the file.
  static ClipCheckpoint open(const std::filesystem::path& path);

  const io::SafetensorsCheckpoint& files() const { return *files_; }
  const std::string& prefix() const { return prefix_; }  // "", "text_model.", ...
  // Shapes under the model's own names (prefix removed).
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  const std::filesystem::path& configJsonPath() const { return configJson_; }
  // config.json when there is one, else ClipTextConfig::fromShapes (with the head
  // count when given: a single file does not hold it).
  ClipTextConfig config(std::optional<int64_t> numAttentionHeads = std::nullopt) const;

 private:
  std::shared_ptr<io::SafetensorsCheckpoint> files_;
  std::string prefix_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::filesystem::path configJson_;
};

// Copies every parameter of `model` from `ckpt`, converting dtype and device.
// Strict: throws LoadError naming the file(s) and every missing, unexpected and
// mis-shaped key before anything is copied. Returns the known unused keys found, with why.
std::vector<std::string> loadClipTextWeights(ClipTextModel& model, const ClipCheckpoint& ckpt);

// Opens `path`, takes the config (`config` if given, else ClipCheckpoint::config()),
// builds the model with `options` and loads it.
std::shared_ptr<ClipTextModel> loadClipTextModel(const std::filesystem::path& path,
                                                 const ClipBuildOptions& options = {},
                                                 const std::optional<ClipTextConfig>& config = std::nullopt);

}  // namespace strata::clip
