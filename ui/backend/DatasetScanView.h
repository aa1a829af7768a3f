#pragma once
// What the Setup tab's dataset view shows of an `images` folder (filled by
// DatasetBackend from train/ImageFolder's scan) or of a `jsonl` file (from the
// causal LM's LmDataset reader). Plain Qt values.
#include <QImage>
#include <QSize>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>
#include <memory>

namespace strata::config {
struct DatasetConfig;
}

namespace strata::ui {

// One dataset of the config (ConfigDocument::datasets), as the dataset view lists it.
struct DatasetEntryView {
  QString type;              // "images", "jsonl", "shapes", ...
  bool previewable = false;  // an image folder or a jsonl file: its data can be shown (the others the trainer draws)
  bool jsonl = false;
  QString path;  // what a scan reads: the image folder (folder_path) or the jsonl file (file_path)
  // The entry itself, for the backend's scan (DatasetBackend.h); opaque to the pages.
  std::shared_ptr<const config::DatasetConfig> entry;
};

struct DatasetThumb {
  QString path;
  QString caption;  // as trained (default caption, trigger word applied)
  bool defaultedCaption = false;
  QImage image;  // at most thumbSide on its longer side
  QSize size;    // the image's upright size
};

struct DatasetBucketCount {
  qint64 resolution = 0;
  QString bucket;    // "512x512"
  qint64 count = 0;  // training views (each flip counts)
};

struct DatasetSkip {
  QString path;
  QString reason;
};

// A jsonl line that gives a sample, split as the trainer splits it.
struct DatasetTextRow {
  qint64 line = 0;  // 1-based
  QString prompt;   // no loss on it (with text_field: up to and with the response marker)
  QString response;
};

struct DatasetScanView {
  bool ok = false;
  bool jsonl = false;  // a jsonl file: lines, samples, rows and skipped (as "line N") are set
  QString error;       // the folder cannot be listed, ...
  QString folder;
  qint64 images = 0;   // used
  qint64 entries = 0;  // training views: images x resolutions x flips
  QVector<DatasetBucketCount> buckets;
  QVector<DatasetSkip> skipped;
  QStringList defaultedCaptions;  // images without a caption file
  QVector<DatasetThumb> thumbs;
  int thumbsLeftOut = 0;         // used images beyond maxThumbs
  qint64 lines = 0;              // jsonl: lines read
  qint64 samples = 0;            // jsonl: lines that give a sample
  QVector<DatasetTextRow> rows;  // jsonl: the first samples
  // jsonl: the samples per layout their lines were read in ("prompt/completion", "messages",
  // "prompt/response": the configured fields), in the order first met.
  QVector<QPair<QString, qint64>> layouts;
};

}  // namespace strata::ui
