#pragma once
// What the Setup tab's dataset view shows of an `images` folder, from
// train/ImageFolder's own scan (the images the trainer would use, their buckets,
// what it skips and why) plus a thumbnail of each used image. Internal to
// strata_ui; Qt value types only (no LibTorch). Runs on a worker thread.
#include <atomic>

#include "config/RunConfig.h"
#include "ui/DatasetScanView.h"

namespace strata::ui {

// Scans `cfg`'s folder as the trainer would. `cancel` is checked between
// thumbnails (a newer scan makes this one moot).
DatasetScanView scanDatasetFolder(const config::DatasetConfig& cfg, int maxThumbs, int thumbSide,
                                  const std::atomic<bool>* cancel = nullptr);

}  // namespace strata::ui
