#include "train/ImageDataset.h"

#include <set>

#include "common/Error.h"
#include "events/EventBus.h"

namespace strata::train {

namespace {
constexpr size_t kNamesListed = 10;  // file names in the missing-caption warning

// "...: no usable image in F (N skipped):" and one line per file with its reason (the first 20).
std::string noUsableImage(const std::string& where, const config::DatasetConfig& cfg,
                          const std::vector<SkippedFile>& skipped) {
  constexpr size_t kReasonsListed = 20;
  std::string msg = where + ".folder_path: no usable image in " + cfg.folderPath;
  if (skipped.empty()) return msg + " (no .png, .jpg, .jpeg or .webp file)";
  msg += " (" + std::to_string(skipped.size()) + " skipped):";
  for (size_t i = 0; i < skipped.size() && i < kReasonsListed; ++i)
    msg += "\n    " + skipped[i].path.filename().string() + ": " + skipped[i].reason;
  if (skipped.size() > kReasonsListed)
    msg += "\n    ... and " + std::to_string(skipped.size() - kReasonsListed) + " more";
  return msg;
}

}  // namespace

ImageDataset::ImageDataset(const config::DatasetConfig& cfg, size_t index, Encoders encoders,
                           const events::EventBus* bus)
    : scan_(scanImageFolder(cfg)), repeats_(cfg.numRepeats) {
  const std::string where = "datasets[" + std::to_string(index) + "]";
  if (repeats_ < 1) throw ConfigError(where + ".num_repeats: must be at least 1");
  if (scan_.entries.empty()) throw ConfigError(noUsableImage(where, cfg, scan_.skipped));
  // The summary before the (long) caching: what the scan found; what caching drops is said after.
  if (bus) {
    events::DatasetEvent e;
    e.index = static_cast<int64_t>(index);
    e.images = scan_.images;
    e.entries = static_cast<int64_t>(scan_.entries.size());
    for (const auto& [b, n] : scan_.bucketCounts) e.buckets.push_back(b.name() + ": " + std::to_string(n));
    for (const auto& s : scan_.skipped) e.skipped.push_back(s.path.string() + ": " + s.reason);
    e.defaultedCaptions = static_cast<int64_t>(scan_.defaultedCaptions.size());
    bus->publish(e);
    // Each skipped file and each repaired caption once, and the images without a caption file together.
    for (const auto& s : scan_.skipped)
      bus->publish(events::WarningEvent{where + ": skipped " + s.path.string() + ": " + s.reason, 0});
    for (const auto& s : scan_.repairedCaptions)
      bus->publish(events::WarningEvent{where + ": caption " + s.path.string() + ": " + s.reason, 0});
    if (!scan_.defaultedCaptions.empty()) {
      std::string names;
      for (size_t i = 0; i < scan_.defaultedCaptions.size() && i < kNamesListed; ++i)
        names += (i ? ", " : "") + scan_.defaultedCaptions[i].filename().string();
      if (scan_.defaultedCaptions.size() > kNamesListed) names += ", ...";
      bus->publish(events::WarningEvent{where + ": " + std::to_string(scan_.defaultedCaptions.size()) +
                                            " image(s) without a caption file (" + cfg.captionExt +
                                            "), trained with default_caption \"" + cfg.defaultCaption + "\": " + names,
                                        0});
    }
  }
  const std::filesystem::path folder =
      cfg.cacheLatentsToDisk ? std::filesystem::path(cfg.folderPath) / kCacheFolderName : std::filesystem::path();
  cache_ = std::make_unique<EncodeCache>(folder, std::move(encoders), bus);
  // With the captions, the caption-dropout embedding: the empty caption, through the same encoder.
  stats_ = cache_->build(scan_.entries, kCacheBatchSize, {""});
  // Images gone or changed while the cache was built are left out, each said once with its reason.
  if (!stats_.skipped.empty()) {
    std::set<std::filesystem::path> gone;
    for (const auto& s : stats_.skipped) {
      gone.insert(s.path);
      scan_.skipped.push_back(s);
      if (bus) bus->publish(events::WarningEvent{where + ": skipped " + s.path.string() + ": " + s.reason, 0});
    }
    std::vector<ImageEntry> kept;
    for (auto& e : scan_.entries)
      if (!gone.count(e.image)) kept.push_back(std::move(e));
    scan_.entries = std::move(kept);
    scan_.bucketCounts.clear();
    std::set<std::filesystem::path> images;
    for (const auto& e : scan_.entries) {
      ++scan_.bucketCounts[e.bucket];
      images.insert(e.image);
    }
    scan_.images = static_cast<int64_t>(images.size());
    if (scan_.entries.empty()) throw ConfigError(noUsableImage(where, cfg, scan_.skipped));
  }
  empty_ = cache_->text("");
}

TrainItem ImageDataset::item(size_t index) const {
  if (index >= size()) throw Error("images dataset: index out of range");
  const ImageEntry& e = scan_.entries[index % scan_.entries.size()];
  TrainItem out;
  out.latents = cache_->latents(e);  // [C, h, w]
  TextEmbedding t = cache_->text(e.caption);
  out.txt = t.txt;
  out.pooled = t.pooled;
  out.caption = e.caption;
  return out;
}

std::string ImageDataset::describe() const {
  return "images: " + std::to_string(scan_.images) + " images, " + std::to_string(scan_.entries.size()) +
         " entries x " + std::to_string(repeats_) + " repeats, " + std::to_string(scan_.bucketCounts.size()) +
         " buckets, " + std::to_string(scan_.skipped.size()) + " skipped";
}

std::string ImageDataset::oneItemShape() const {
  if (scan_.bucketCounts.size() != 1) return "";
  const Bucket& b = scan_.bucketCounts.begin()->first;
  return "images of " + std::to_string(b.width) + "x" + std::to_string(b.height) + " px";
}

}  // namespace strata::train
