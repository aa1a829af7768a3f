#pragma once
// The `images` dataset's folder (ai-toolkit / kohya convention): image files
// (png, jpg, jpeg, webp) with a same-named caption file (`caption_ext`). The
// scan reads every image once (EXIF orientation applied), assigns it a bucket
// for each configured resolution and records, without throwing, what it
// skipped and why.
#include <ATen/ATen.h>

#include <cstddef>
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
  std::string imageHash;  // contentHash of the bytes the scan decoded: the cache key's image
  std::string caption;    // after default_caption and trigger_word
  int64_t resolution = 0;
  Bucket bucket;
  bool flip = false;
};

struct SkippedFile {
  std::filesystem::path path;
  std::string reason;
};

struct ImageFolderScan {
  std::vector<ImageEntry> entries;   // without num_repeats (the dataset repeats them)
  std::vector<SkippedFile> skipped;  // unreadable, empty, truncated, too small, a bad caption file
  // Caption files read after a repair (UTF-16 converted, invalid UTF-8 replaced): the caption file and what was done.
  std::vector<SkippedFile> repairedCaptions;
  std::vector<std::filesystem::path> defaultedCaptions;  // no caption file: default_caption used
  std::map<Bucket, int64_t> bucketCounts;                // entries per bucket
  int64_t images = 0;                                    // images used
  // "images: 5 used, 3 skipped (...)" and the bucket table, one line each.
  std::vector<std::string> reportLines() const;
};

// A caption file's bytes as UTF-8 text. A UTF-8 byte-order mark is dropped;
// UTF-16 with a byte-order mark is converted; bytes that are not UTF-8 become
// U+FFFD (then `repair` says how many). A file with NUL bytes (binary, or UTF-16
// without a byte-order mark) is not text: `error` says so and `text` is empty.
struct CaptionText {
  std::string text;
  std::string repair;  // "" when read as is
  std::string error;   // "" when usable
};
CaptionText decodeCaptionBytes(const std::string& bytes);

// Caption files larger than this are not captions (T5 reads 512 tokens).
constexpr std::size_t kMaxCaptionBytes = 1u << 20;

// The caption as trained: [trigger] replaced by the trigger word; a trigger
// word not in the caption is put in front ("word, caption").
std::string applyTriggerWord(const std::string& caption, const std::string& triggerWord);

// An image file larger than this is skipped before it is read (a 100-megapixel
// 16-bit PNG is under 600 MB; what is larger is not a training image).
constexpr std::size_t kMaxImageFileBytes = std::size_t{1} << 30;

// Throws IoError only when the folder cannot be listed. `stopAfterUsable` > 0:
// stop once that many usable images are found (the editor's "does this folder
// yield anything" check must not read and decode every photo on the GUI thread).
ImageFolderScan scanImageFolder(const config::DatasetConfig& cfg, std::size_t stopAfterUsable = 0);

// The pixels of an entry: rgb [3, bucket.height, bucket.width] in [-1, 1] (EXIF
// orientation applied, resized + centre-cropped, mirrored when flip). Throws
// IoError when the file can no longer be read or its bytes are no longer the
// ones the scan saw (entry.imageHash).
at::Tensor loadEntryPixels(const ImageEntry& entry);
// The same from the file's bytes, read once by the caller and hashed by it.
at::Tensor entryPixelsFromBytes(const ImageEntry& entry, const std::string& bytes);

// The bytes' content hash (XXH64, hex) that keys the caches.
std::string contentHash(const std::string& bytes);

}  // namespace strata::train
