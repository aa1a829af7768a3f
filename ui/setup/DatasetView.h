#pragma once
// The Setup tab's dataset view: for an `images` dataset of the config, its
// thumbnails with their captions, the image count, the bucket counts for the
// configured resolutions, the files the trainer skips and why, and the images
// that get the default caption. Scanned on a worker thread (train/ImageFolder's
// scan, as the trainer does it) and scanned again when the folder, the
// resolutions, the caption extension, the default caption, the trigger word or
// flip_x change, or on Rescan. For a `jsonl` dataset (a causal LM's): its first
// samples split into prompt and response as the trainer splits them, and every
// line it skips with its number and reason (the core's reader). The entries are the
// config document's (ConfigDocument::datasets); the scans are the backend's.
#include <QWidget>
#include <atomic>
#include <memory>

#include "ui/backend/DatasetScanView.h"

class QComboBox;
class QLabel;
class QListWidget;
class QPushButton;
class QThreadPool;
class QTimer;
class QTreeWidget;

namespace strata::ui {

class DatasetView : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kMaxThumbs = 400;
  static constexpr int kThumbSide = 112;
  static constexpr int kSettleMs = 400;      // typing a folder path: scan once it pauses
  static constexpr int kMaxJsonlRows = 200;  // jsonl samples shown (all are counted)

  explicit DatasetView(QWidget* parent = nullptr);
  ~DatasetView() override;  // waits for a scan in flight

  // The config's datasets; scans the chosen one again when what it shows changed.
  void setDatasets(const QVector<DatasetEntryView>& datasets);
  void chooseDataset(int index);
  int chosenDataset() const { return chosen_; }
  bool isScanning() const { return scanning_; }
  int scanCount() const { return scans_; }  // scans finished and shown
  const DatasetScanView& lastScan() const { return last_; }
  QString summaryText() const;

 public slots:
  void rescan();

 signals:
  void scanFinished();

 private:
  void showScan(const DatasetScanView& scan, int generation);
  void showNotImages();

  QVector<DatasetEntryView> datasets_;
  std::unique_ptr<DatasetEntryView> shown_;  // what the last scan was of; null = none yet
  int chosen_ = 0;
  bool scanning_ = false;
  int scans_ = 0;
  int generation_ = 0;
  std::shared_ptr<std::atomic<bool>> cancel_;
  DatasetScanView last_;

  QThreadPool* pool_ = nullptr;
  QTimer* settle_ = nullptr;
  QComboBox* chooser_ = nullptr;
  QPushButton* rescan_ = nullptr;
  QLabel* state_ = nullptr;
  QLabel* summary_ = nullptr;
  QTreeWidget* buckets_ = nullptr;
  QTreeWidget* skipped_ = nullptr;
  QListWidget* thumbs_ = nullptr;
  QTreeWidget* jsonlRows_ = nullptr;
};

}  // namespace strata::ui
