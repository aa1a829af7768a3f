#pragma once
// Latents and text embeddings of an `images` dataset, computed once and kept
// in a cache folder (or in memory when cache_latents_to_disk is false). The
// encoders come in as functions, so the cache knows no model family:
//   image: rgb [B, 3, H, W] in [-1, 1] -> latents [B, C, H/8, W/8]
//   text:  captions -> one {txt [N, D], pooled [P]} each
// Each file is keyed by everything that changes its content: latents by the
// image bytes' hash, the VAE's identity, the bucket and the flip; text by the
// caption, the text encoders' identity and the max sequence length. A file is
// validated on read (its stored key and tensor shapes) and rebuilt when stale
// or corrupt. Files are written atomically (safetensors).
#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train/ImageFolder.h"
#include "train/TextEmbedder.h"

namespace strata::events {
class EventBus;
}

namespace strata::train {

struct Encoders {
  std::function<at::Tensor(const at::Tensor&)> image;                               // see above
  std::function<std::vector<TextEmbedding>(const std::vector<std::string>&)> text;  // see above
  std::string imageModelId;  // changes when the VAE's weights or dtype change
  std::string textModelId;   // the same for T5 + CLIP
  int64_t maxSequenceLength = 512;
};

// Images (and captions) per encoder call while the cache is built: the batch the
// planner sizes the caching phase's activations for (train::prepareRun).
constexpr int64_t kCacheBatchSize = 4;

struct CacheStats {
  int64_t latentsEncoded = 0;  // images run through the image encoder
  int64_t textsEncoded = 0;    // captions run through the text encoder
  int64_t reused = 0;          // files found valid
  int64_t rebuilt = 0;         // files found stale or corrupt (and re-encoded)
};

class EncodeCache {
 public:
  // `folder` empty: keep everything in memory.
  EncodeCache(std::filesystem::path folder, Encoders encoders, const events::EventBus* bus = nullptr);

  // Encodes what is missing, invalid or stale; images in batches of the same
  // bucket; the captions and `extraTexts` (the empty caption) as one text stage.
  // Publishes CacheProgressEvents. Throws IoError when an image can no longer be
  // read or a file cannot be written.
  CacheStats build(const std::vector<ImageEntry>& entries, int64_t batchSize = kCacheBatchSize,
                   const std::vector<std::string>& extraTexts = {});
  // The text embeddings of `texts` alone (sample prompts, the empty caption),
  // with progress events of `stage`.
  CacheStats buildTexts(const std::vector<std::string>& texts, const std::string& stage = "text",
                        int64_t batchSize = kCacheBatchSize);
  // The cached tensors: latents [C, h, w], txt [N, D], pooled [P] (float32).
  at::Tensor latents(const ImageEntry& entry) const;
  TextEmbedding text(const std::string& caption) const;

  std::filesystem::path latentsFile(const ImageEntry& entry) const;
  std::filesystem::path textFile(const std::string& caption) const;

 private:
  std::string latentsKey(const ImageEntry& entry) const;
  std::string textKey(const std::string& caption) const;
  // The tensors of a cache file when its key matches and it reads; else empty.
  std::map<std::string, at::Tensor> readValid(const std::filesystem::path& file, const std::string& key) const;
  void store(const std::filesystem::path& file, const std::string& key,
             const std::vector<std::pair<std::string, at::Tensor>>& tensors);

  std::filesystem::path folder_;
  Encoders enc_;
  const events::EventBus* bus_;
  mutable std::map<std::string, std::string> imageHash_;             // image path -> content hash
  std::map<std::string, std::map<std::string, at::Tensor>> memory_;  // key -> tensors (memory mode)
};

}  // namespace strata::train
