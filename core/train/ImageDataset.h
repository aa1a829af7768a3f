#pragma once
// The `images` dataset: a scanned folder (ImageFolder) whose latents and text
// embeddings come from an EncodeCache; num_repeats repeats every entry.
#include <memory>

#include "train/Datasets.h"
#include "train/EncodeCache.h"
#include "train/ImageFolder.h"

namespace strata::train {

class ImageDataset final : public Dataset {
 public:
  // Scans cfg.folder_path, publishes a DatasetEvent and one WarningEvent per
  // skipped file (and one for the images without a caption file), builds the
  // cache (in folder_path/_strata_cache when cache_latents_to_disk, else in
  // memory) with the captions and the empty caption (caption dropout).
  ImageDataset(const config::DatasetConfig& cfg, size_t index, Encoders encoders,
               const events::EventBus* bus = nullptr);
  size_t size() const override { return scan_.entries.size() * static_cast<size_t>(repeats_); }
  TrainItem item(size_t index) const override;
  TextEmbedding emptyPrompt() const override { return empty_; }
  std::string describe() const override;
  // One aspect-ratio bucket (one resolution whose images all fall in one bucket): the
  // bucket's size. The run's text encoder gives every caption one length (padded to
  // its max_sequence_length), and its VAE every image of a bucket one latent shape.
  std::string oneItemShape() const override;

  const ImageFolderScan& scan() const { return scan_; }
  const CacheStats& cacheStats() const { return stats_; }

 private:
  ImageFolderScan scan_;
  int64_t repeats_ = 1;
  std::unique_ptr<EncodeCache> cache_;
  CacheStats stats_;
  TextEmbedding empty_;
};

// The cache folder of an images dataset.
constexpr const char* kCacheFolderName = "_strata_cache";

}  // namespace strata::train
