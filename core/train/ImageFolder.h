#pragma once
// The `images` dataset's folder (ai-toolkit / kohya convention): image files
// (png, jpg, jpeg, webp) with a same-named caption file (`caption_ext`). The
// scan reads every image once (EXIF orientation applied), assigns it a bucket
// for each configured resolution and records, without throwing, what it
// skipped and why.
#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "train/Buckets.h"

namespace strata::train {

// One training view of an image: at one resolution's bucket, maybe mirrored.
struct ImageEntry {
  std::filesystem::path image;
  std::string caption;  // after default_caption and trigger_word
  int64_t resolution = 0;
  Bucket bucket;
  bool flip = false;
};

struct SkippedFile {
  std::filesystem::path path;
  std::string reason;
};

struct ImageFolderScan {
  std::vector<ImageEntry> entries;                       // without num_repeats (the dataset repeats them)
  std::vector<SkippedFile> skipped;                      // unreadable, empty, truncated, too small
  std::vector<std::filesystem::path> defaultedCaptions;  // no caption file: default_caption used
  std::map<Bucket, int64_t> bucketCounts;                // entries per bucket
  int64_t images = 0;                                    // images used
  // "images: 5 used, 3 skipped (...)" and the bucket table, one line each.
  std::vector<std::string> reportLines() const;
};

// The caption as trained: [trigger] replaced by the trigger word; a trigger
// word not in the caption is put in front ("word, caption").
std::string applyTriggerWord(const std::string& caption, const std::string& triggerWord);

// Throws IoError only when the folder cannot be listed.
ImageFolderScan scanImageFolder(const config::DatasetConfig& cfg);

// The pixels of an entry: rgb [3, bucket.height, bucket.width] in [-1, 1] (EXIF
// orientation applied, resized + centre-cropped, mirrored when flip). Throws
// IoError when the file can no longer be read.
at::Tensor loadEntryPixels(const ImageEntry& entry);

// The bytes' content hash (FNV-1a 64, hex) that keys the caches.
std::string contentHash(const std::string& bytes);

}  // namespace strata::train
