#pragma once
// What the Setup tab's dataset view shows of an `images` folder (or a jsonl file), from
// train/ImageFolder's own scan (the images the trainer would use, their buckets,
// what it skips and why) plus a thumbnail of each used image. Qt value types only
// (no LibTorch, no core header): the dataset view (ui/setup) calls it. Runs on a worker thread.
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

// A dataset entry as the pages hold it (ConfigDocument::datasets makes one per entry).
DatasetEntryView datasetEntryView(const config::DatasetConfig& cfg);

// The same for a dataset of the config as the pages hold it (ConfigDocument::datasets):
// its folder scanned, or its jsonl file previewed, by its type.
DatasetScanView scanDataset(const DatasetEntryView& dataset, int maxThumbs, int thumbSide, int maxRows,
                            const std::atomic<bool>* cancel = nullptr);
// Whether a scan of `a` shows what one of `b` does: the same type and the keys its
// scan reads (num_repeats only multiplies, and is not one of them).
bool sameScan(const DatasetEntryView& a, const DatasetEntryView& b);

}  // namespace strata::ui
