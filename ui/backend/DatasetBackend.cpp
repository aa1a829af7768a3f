// LibTorch before Qt: Qt's `slots` macro breaks ATen's headers (ivalue_inl.h).
#include "config/RunConfig.h"
#include "io/Image.h"
#include "train/ImageFolder.h"
#include "train/TextRecords.h"
#include "io/FileBytes.h"

#include <algorithm>
#include <exception>
#include <map>
#include <set>
#include <utility>

#include "ui/backend/DatasetBackend.h"

namespace strata::ui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

// The upright image scaled to fit thumbSide (uint8 [H, W, 3] from the core's reader).
QImage thumbnailOf(const std::filesystem::path& path, int thumbSide, QSize* size) {
  const io::DecodedImage img = io::readImage(path, io::ImageChannels::Rgb);
  const at::Tensor hwc = io::applyExifOrientation(img.pixels, img.orientation).contiguous();  // [H, W, 3]
  const int h = int(hwc.size(0)), w = int(hwc.size(1));
  *size = QSize(w, h);
  const QImage view(hwc.data_ptr<uint8_t>(), w, h, 3 * w, QImage::Format_RGB888);
  return view.scaled(thumbSide, thumbSide, Qt::KeepAspectRatio, Qt::SmoothTransformation);  // a copy
}

}  // namespace

DatasetScanView scanDatasetFolder(const config::DatasetConfig& cfg, int maxThumbs, int thumbSide,
                                  const std::atomic<bool>* cancel) {
  DatasetScanView v;
  v.folder = qs(cfg.folderPath);
  train::ImageFolderScan scan;
  try {
    scan = train::scanImageFolder(cfg);
  } catch (const std::exception& e) {
    v.error = QString::fromUtf8(e.what());
    return v;
  }
  v.ok = true;
  v.images = scan.images;
  v.entries = qint64(scan.entries.size());
  std::map<std::pair<int64_t, train::Bucket>, int64_t> perResolution;
  for (const train::ImageEntry& e : scan.entries) ++perResolution[{e.resolution, e.bucket}];
  for (const auto& [key, n] : perResolution) v.buckets << DatasetBucketCount{key.first, qs(key.second.name()), n};
  for (const train::SkippedFile& s : scan.skipped) v.skipped << DatasetSkip{qs(s.path.string()), qs(s.reason)};
  std::set<std::filesystem::path> defaulted(scan.defaultedCaptions.begin(), scan.defaultedCaptions.end());
  for (const auto& p : scan.defaultedCaptions) v.defaultedCaptions << qs(p.string());

  std::set<std::filesystem::path> seen;  // an image has an entry per resolution and flip
  for (const train::ImageEntry& e : scan.entries) {
    if (!seen.insert(e.image).second) continue;
    if (int(v.thumbs.size()) >= maxThumbs) {
      ++v.thumbsLeftOut;
      continue;
    }
    if (cancel && cancel->load()) break;
    DatasetThumb t;
    t.path = qs(e.image.string());
    t.caption = qs(e.caption);
    t.defaultedCaption = defaulted.count(e.image) > 0;
    try {
      t.image = thumbnailOf(e.image, thumbSide, &t.size);
    } catch (const std::exception&) {
      // Changed on disk since the scan read it: listed without a picture.
    }
    v.thumbs << t;
  }
  return v;
}

DatasetScanView previewJsonl(const config::DatasetConfig& cfg, int maxRows, const std::atomic<bool>* cancel) {
  DatasetScanView v;
  v.jsonl = true;
  v.folder = qs(cfg.filePath);
  std::string text;
  try {
    text = io::readFileBytes(cfg.filePath);
  } catch (const std::exception& e) {
    v.error = QString::fromUtf8(e.what());
    return v;
  }
  // The reader of the family that trains on jsonl (train/TextRecords.h): the same
  // fields, marker and skip rules as its trainer, without naming the family here.
  try {
    v.lines = train::readTextRecords(cfg, text, [&](const train::TextRecord& r) {
      if (!r.skipReason.empty()) {
        v.skipped.push_back({QString("line %1").arg(r.line), qs(r.skipReason)});
      } else {
        ++v.samples;
        const QString layout = qs(r.layout);
        auto it = std::find_if(v.layouts.begin(), v.layouts.end(), [&](const auto& l) { return l.first == layout; });
        if (it == v.layouts.end())
          v.layouts.push_back({layout, 1});
        else
          ++it->second;
        if (v.rows.size() < maxRows) v.rows.push_back({r.line, qs(r.prompt), qs(r.response)});
      }
      return !(cancel && cancel->load());
    });
  } catch (const std::exception& e) {
    v.error = QString::fromUtf8(e.what());
    return v;
  }
  v.ok = true;
  return v;
}

DatasetEntryView datasetEntryView(const config::DatasetConfig& d) {
  DatasetEntryView v;
  v.type = qs(config::enumName(d.type));
  v.jsonl = d.type == config::DatasetType::Jsonl;
  v.previewable = v.jsonl || d.type == config::DatasetType::Images;
  v.path = qs(v.jsonl ? d.filePath : d.folderPath);
  v.entry = std::make_shared<const config::DatasetConfig>(d);
  return v;
}

DatasetScanView scanDataset(const DatasetEntryView& dataset, int maxThumbs, int thumbSide, int maxRows,
                            const std::atomic<bool>* cancel) {
  if (!dataset.entry) return DatasetScanView{};
  return dataset.entry->type == config::DatasetType::Jsonl
             ? previewJsonl(*dataset.entry, maxRows, cancel)
             : scanDatasetFolder(*dataset.entry, maxThumbs, thumbSide, cancel);
}

bool sameScan(const DatasetEntryView& x, const DatasetEntryView& y) {
  if (!x.entry || !y.entry) return x.entry == y.entry;
  const config::DatasetConfig& a = *x.entry;
  const config::DatasetConfig& b = *y.entry;
  if (a.type != b.type) return false;
  if (a.type == config::DatasetType::Jsonl)
    return a.filePath == b.filePath && a.promptField == b.promptField && a.responseField == b.responseField &&
           a.textField == b.textField && a.responseMarker == b.responseMarker;
  return a.folderPath == b.folderPath && a.resolution == b.resolution && a.captionExt == b.captionExt &&
         a.defaultCaption == b.defaultCaption && a.triggerWord == b.triggerWord && a.flipX == b.flipX;
}

}  // namespace strata::ui
