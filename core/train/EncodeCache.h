#pragma once
// Latents and text embeddings of an `images` dataset, computed once and kept
// in a cache folder (or in memory when cache_latents_to_disk is false). The
// encoders come in as functions, so the cache knows no model family:
//   image: rgb [B, 3, H, W] in [-1, 1] -> latents [B, C, H/f, W/f]
//   text:  captions -> one {txt [L, D], pooled [P]} each
// Each file is keyed by everything that changes its content: latents by the
// hash of the image bytes the folder scan decoded (the same bytes are decoded
// here, or the image is skipped), the VAE's identity, the bucket and the flip;
// text by a hash of the caption (the caption itself is never written), the text
// encoders' identity and the max sequence length. The key starts with the cache
// format's version, so files of another format are never read as this one.
// A file is checked on every read: its stored key, its tensors' names, dtype
// and shapes against what the run expects, a checksum of the tensors, finite
// values; a bad or missing file is rebuilt and said so (a WarningEvent). Files
// are written atomically (safetensors).
#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/Safetensors.h"
#include "train/ImageFolder.h"
#include "train/TextEmbedder.h"

namespace strata::events {
class EventBus;
}

namespace strata::train {

struct Encoders {
  std::function<at::Tensor(const at::Tensor&)> image;                               // see above
  std::function<std::vector<TextEmbedding>(const std::vector<std::string>&)> text;  // see above
  std::string imageModelId;         // changes when the VAE's weights or dtype change
  std::string textModelId;          // the same for T5 + CLIP
  int64_t maxSequenceLength = 512;  // L
  // What the run expects of every entry (checked on read and after encoding).
  int64_t latentChannels = 0;   // C
  int64_t downscaleFactor = 0;  // f: image pixels per latent pixel
  int64_t textDim = 0;          // D
  int64_t pooledDim = 0;        // P; 0: the model takes no pooled vector (FLUX.2), none is stored
  // Polled between batches while the cache is built: true stops the build with
  // Interrupted (what is written so far stays, and the next run reuses it).
  std::function<bool()> stopRequested;
};

// Images (and captions) per encoder call while the cache is built: the batch the
// planner sizes the caching phase's activations for (train::prepareRun).
constexpr int64_t kCacheBatchSize = 4;

// The cache format; part of every key, so another version's files are not read.
constexpr const char* kCacheFormat = "strata-cache v2";

struct CacheStats {
  int64_t latentsEncoded = 0;  // images run through the image encoder
  int64_t textsEncoded = 0;    // captions run through the text encoder
  int64_t reused = 0;          // files found valid
  int64_t rebuilt = 0;         // files found stale or corrupt (and re-encoded)
  // Images that could not be cached (gone, changed since the scan, no finite
  // latents), one each with the reason: the dataset leaves them out.
  std::vector<SkippedFile> skipped;
};

class EncodeCache {
 public:
  // `folder` empty: keep everything in memory.
  EncodeCache(std::filesystem::path folder, Encoders encoders, const events::EventBus* bus = nullptr);

  // Encodes what is missing, invalid or stale; images in batches of the same
  // bucket; the captions and `extraTexts` (the empty caption) as one text stage.
  // Publishes CacheProgressEvents, and a WarningEvent for each file rebuilt.
  // An image that is gone or changed since the scan is skipped (stats.skipped).
  // Throws IoError when a file cannot be written, Interrupted when
  // Encoders::stopRequested says so (between batches).
  CacheStats build(const std::vector<ImageEntry>& entries, int64_t batchSize = kCacheBatchSize,
                   const std::vector<std::string>& extraTexts = {});
  // The text embeddings of `texts` alone (sample prompts, the empty caption),
  // with progress events of `stage`.
  CacheStats buildTexts(const std::vector<std::string>& texts, const std::string& stage = "text",
                        int64_t batchSize = kCacheBatchSize);
  // The cached tensors: latents [C, h, w], txt [L, D], pooled [P] (float32),
  // checked as they are read. A file that went missing or bad since the build
  // (the cache folder deleted during the run) is written again from the copy this
  // cache still maps, else encoded again; either is a WarningEvent. Throws
  // IoError naming the file when neither is possible.
  at::Tensor latents(const ImageEntry& entry);
  TextEmbedding text(const std::string& caption);

  std::filesystem::path latentsFile(const ImageEntry& entry) const;
  std::filesystem::path textFile(const std::string& caption) const;

  // The tensors' checksum stored in a cache file's header (names, dtypes, shapes, bytes).
  static std::string checksum(const std::map<std::string, at::Tensor>& tensors);

 private:
  using Shapes = std::map<std::string, std::vector<int64_t>>;  // tensor name -> expected shape
  struct Checked {
    std::map<std::string, at::Tensor> tensors;  // float32 copies; empty when not usable
    std::string problem;                        // "" when usable; "missing" when there is no file
  };

  std::string latentsKey(const ImageEntry& entry) const;
  std::string textKey(const std::string& caption) const;
  Shapes latentsShapes(const ImageEntry& entry) const;
  Shapes textShapes() const;
  // The file (or memory entry) checked against its key and the expected shapes.
  Checked readChecked(const std::filesystem::path& file, const std::string& key, const Shapes& shapes);
  // Checks the tensors of an open file; "" when they are what `shapes` and the checksum say.
  static std::string problemOf(const io::SafetensorsFile& f, const std::string& key, const Shapes& shapes);
  void store(const std::filesystem::path& file, const std::string& key,
             const std::vector<std::pair<std::string, at::Tensor>>& tensors);
  // The read path of latents() / text(): checked file, else the pinned copy, else `encode`.
  std::map<std::string, at::Tensor> readOrRebuild(
      const std::filesystem::path& file, const std::string& key, const Shapes& shapes,
      const std::function<std::vector<std::pair<std::string, at::Tensor>>()>& encode);
  void warn(const std::string& message) const;
  // Keeps `f` mapped as the copy of `key` (up to kMaxPinnedCacheFiles files).
  void pin(const std::string& key, const io::SafetensorsFile& f);

  std::filesystem::path folder_;
  Encoders enc_;
  const events::EventBus* bus_;
  std::map<std::string, std::map<std::string, at::Tensor>> memory_;  // key -> tensors (memory mode)
  // key -> the mapping of its checked file: the data stays readable when the file
  // is deleted (the cache folder removed during a run), so it can be written back.
  std::map<std::string, io::SafetensorsFile> pins_;
};

// Files mapped at once by one cache (the kernel allows ~65000 mappings per
// process); past that, a file deleted during the run is encoded again instead.
constexpr size_t kMaxPinnedCacheFiles = 16384;

}  // namespace strata::train
