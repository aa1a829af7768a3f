#pragma once
// What the Setup tab's dataset view shows of an `images` folder (or a jsonl file), from
// train/ImageFolder's own scan (the images the trainer would use, their buckets,
// what it skips and why) plus a thumbnail of each used image. Internal to
// strata_ui; Qt value types only (no LibTorch, no core header). Runs on a worker thread.
#include <atomic>

#include "ui/backend/DatasetScanView.h"

namespace strata::config {
struct DatasetConfig;
}

namespace strata::ui {

// Scans `cfg`'s folder as the trainer would. `cancel` is checked between
// thumbnails (a newer scan makes this one moot).
DatasetScanView scanDatasetFolder(const config::DatasetConfig& cfg, int maxThumbs, int thumbSide,
                                  const std::atomic<bool>* cancel = nullptr);

// Reads `cfg`'s jsonl file with the trainer's reader (train/TextRecords.h: the
// same fields, marker and skip rules as the family that trains on it): the first `maxRows` samples split into
// prompt and response, and every skipped line with its number and reason. What
// needs the tokenizer (cuts to max_seq_len) is checked when the run starts.
DatasetScanView previewJsonl(const config::DatasetConfig& cfg, int maxRows, const std::atomic<bool>* cancel = nullptr);

}  // namespace strata::ui
