#include "train/ImageFolder.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/Error.h"
#include "common/Text.h"
#include "io/FileBytes.h"
#include "io/Image.h"

namespace strata::train {
namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool isImageFile(const fs::path& p) {
  static const std::set<std::string> kExt = {".png", ".jpg", ".jpeg", ".webp"};
  return kExt.count(toLowerAscii(p.extension().string())) > 0;
}

// uint8 [H, W, 3] upright.
at::Tensor readUpright(const fs::path& path) {
  io::DecodedImage img = io::readImage(path, io::ImageChannels::Rgb);
  return io::applyExifOrientation(img.pixels, img.orientation);
}

}  // namespace

std::string contentHash(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string applyTriggerWord(const std::string& caption, const std::string& triggerWord) {
  const std::string kTag = "[trigger]";
  std::string out = caption;
  bool replaced = false;
  for (size_t pos = out.find(kTag); pos != std::string::npos; pos = out.find(kTag, pos + triggerWord.size())) {
    out.replace(pos, kTag.size(), triggerWord);
    replaced = true;
  }
  if (!replaced && !triggerWord.empty() && out.find(triggerWord) == std::string::npos)
    out = out.empty() ? triggerWord : triggerWord + ", " + out;
  return out;
}

ImageFolderScan scanImageFolder(const config::DatasetConfig& cfg) {
  const fs::path folder(cfg.folderPath);
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(folder, ec);
  if (ec) throw IoError(cfg.folderPath + ": cannot list the image folder (" + ec.message() + ")");
  for (const auto& e : it)
    if (e.is_regular_file() && isImageFile(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // a stable order across runs and machines

  std::vector<int64_t> resolutions = cfg.resolution;
  std::sort(resolutions.begin(), resolutions.end());
  resolutions.erase(std::unique(resolutions.begin(), resolutions.end()), resolutions.end());
  std::vector<std::vector<Bucket>> tables;
  for (int64_t r : resolutions) tables.push_back(bucketsFor(r));

  // "txt" and ".txt" both name dog1.txt (ai-toolkit configs use either).
  const std::string captionExt = cfg.captionExt.rfind('.', 0) == 0 ? cfg.captionExt : "." + cfg.captionExt;
  ImageFolderScan scan;
  for (const fs::path& file : files) {
    at::Tensor hwc;
    try {
      hwc = readUpright(file);
    } catch (const Error& e) {
      // The reader names the file and says what is wrong (empty, truncated, corrupt).
      std::string why = e.what();
      const std::string prefix = file.string() + ": ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      scan.skipped.push_back({file, why});
      continue;
    }
    const int64_t h = hwc.size(0), w = hwc.size(1);
    std::vector<std::pair<int64_t, Bucket>> uses;
    for (size_t i = 0; i < resolutions.size(); ++i) {
      const Bucket b = chooseBucket(tables[i], w, h);
      if (coversBucket(w, h, b)) uses.emplace_back(resolutions[i], b);
    }
    if (uses.empty()) {
      const Bucket b = chooseBucket(tables.front(), w, h);
      scan.skipped.push_back({file, "too small: " + std::to_string(w) + "x" + std::to_string(h) +
                                        " does not cover the smallest bucket " + b.name()});
      continue;
    }
    fs::path captionFile = file;
    captionFile.replace_extension(captionExt);
    std::string caption;
    if (fs::is_regular_file(captionFile, ec)) {
      caption = trim(io::readFileBytes(captionFile));
    } else {
      caption = cfg.defaultCaption;
      scan.defaultedCaptions.push_back(file);
    }
    caption = applyTriggerWord(caption, cfg.triggerWord);
    ++scan.images;
    for (const auto& [res, bucket] : uses)
      for (int flip = 0; flip <= (cfg.flipX ? 1 : 0); ++flip) {
        scan.entries.push_back({file, caption, res, bucket, flip == 1});
        ++scan.bucketCounts[bucket];
      }
  }
  return scan;
}

std::vector<std::string> ImageFolderScan::reportLines() const {
  std::vector<std::string> lines;
  lines.push_back("images: " + std::to_string(images) + " used (" + std::to_string(entries.size()) + " entries), " +
                  std::to_string(skipped.size()) + " skipped, " + std::to_string(defaultedCaptions.size()) +
                  " without a caption file (default caption used)");
  std::string table = "buckets:";
  for (const auto& [b, n] : bucketCounts) table += " " + b.name() + "=" + std::to_string(n);
  lines.push_back(table);
  for (const SkippedFile& s : skipped) lines.push_back("skipped " + s.path.string() + ": " + s.reason);
  return lines;
}

at::Tensor loadEntryPixels(const ImageEntry& entry) {
  at::Tensor chw = io::imageToFloatChw(readUpright(entry.image));   // [3, H, W] in [0, 1]
  at::Tensor x = resizeAndCrop(chw, entry.bucket).clamp(0.0, 1.0);  // [3, bh, bw]; resampling can overshoot by an ulp
  if (entry.flip) x = x.flip({2});
  return x.mul(2.0).sub(1.0).contiguous();  // [-1, 1]
}

}  // namespace strata::train
