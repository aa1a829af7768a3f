#pragma once
// What the Setup tab's dataset view shows of an `images` folder (filled by
// DatasetBackend from train/ImageFolder's scan). Plain Qt values.
#include <QImage>
#include <QSize>
#include <QString>
#include <QStringList>
#include <QVector>

namespace strata::ui {

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

struct DatasetScanView {
  bool ok = false;
  QString error;  // the folder cannot be listed, ...
  QString folder;
  qint64 images = 0;   // used
  qint64 entries = 0;  // training views: images x resolutions x flips
  QVector<DatasetBucketCount> buckets;
  QVector<DatasetSkip> skipped;
  QStringList defaultedCaptions;  // images without a caption file
  QVector<DatasetThumb> thumbs;
  int thumbsLeftOut = 0;  // used images beyond maxThumbs
};

}  // namespace strata::ui
