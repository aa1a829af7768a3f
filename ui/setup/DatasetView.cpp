#include "ui/setup/DatasetView.h"

#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QMetaObject>
#include <QPointer>
#include <QPushButton>
#include <QSplitter>
#include <QThreadPool>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "ui/backend/DatasetBackend.h"

namespace strata::ui {

namespace {

QTreeWidget* makeTable(QWidget* parent, const QString& name, const QStringList& headers) {
  auto* t = new QTreeWidget(parent);
  t->setObjectName(name);
  t->setColumnCount(headers.size());
  t->setHeaderLabels(headers);
  t->setRootIsDecorated(false);
  t->setAlternatingRowColors(true);
  t->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->header()->setStretchLastSection(true);
  return t;
}

}  // namespace

DatasetView::DatasetView(QWidget* parent) : QWidget(parent), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  setObjectName("datasetView");
  pool_ = new QThreadPool(this);
  pool_->setMaxThreadCount(1);
  settle_ = new QTimer(this);
  settle_->setSingleShot(true);
  settle_->setInterval(kSettleMs);
  connect(settle_, &QTimer::timeout, this, &DatasetView::rescan);

  chooser_ = new QComboBox(this);
  chooser_->setObjectName("datasetChooser");
  connect(chooser_, qOverload<int>(&QComboBox::activated), this, &DatasetView::chooseDataset);
  rescan_ = new QPushButton(tr("Rescan"), this);
  rescan_->setObjectName("datasetRescan");
  rescan_->setToolTip(tr("Read the folder again (after adding, removing or editing files)"));
  connect(rescan_, &QPushButton::clicked, this, &DatasetView::rescan);
  state_ = new QLabel(this);
  state_->setObjectName("datasetScanState");
  auto* top = new QHBoxLayout;
  top->addWidget(chooser_);
  top->addWidget(state_, 1);
  top->addWidget(rescan_);

  summary_ = new QLabel(this);
  summary_->setObjectName("datasetSummary");
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  buckets_ = makeTable(this, "datasetBuckets", {tr("Resolution"), tr("Bucket"), tr("Views")});
  buckets_->setToolTip(
      tr("Training views per aspect-ratio bucket (an image counts once per resolution, "
         "twice with flip_x)"));
  skipped_ = makeTable(this, "datasetSkipped", {tr("Skipped file"), tr("Why")});
  thumbs_ = new QListWidget(this);
  thumbs_->setObjectName("datasetThumbnails");
  thumbs_->setViewMode(QListView::IconMode);
  thumbs_->setIconSize(QSize(kThumbSide, kThumbSide));
  // Room for three lines of caption under each picture; longer ones are in the tooltip.
  thumbs_->setGridSize(QSize(kThumbSide + 48, kThumbSide + 3 * thumbs_->fontMetrics().height() + 14));
  thumbs_->setTextElideMode(Qt::ElideRight);
  thumbs_->setResizeMode(QListView::Adjust);
  thumbs_->setMovement(QListView::Static);
  thumbs_->setWordWrap(true);

  jsonlRows_ = makeTable(this, "datasetJsonlPreview", {tr("Line"), tr("Prompt (no loss)"), tr("Response (trained)")});
  // The line number fits its numbers; prompt and response share the rest (the prompt can be dragged wider).
  jsonlRows_->header()->setSectionResizeMode(1, QHeaderView::Interactive);
  jsonlRows_->header()->resizeSection(1, 320);
  jsonlRows_->setWordWrap(true);
  jsonlRows_->setToolTip(
      tr("The first samples of the file, split into prompt and response as the trainer splits "
         "them: the loss is on the response only"));
  jsonlRows_->hide();

  auto* tables = new QSplitter(Qt::Horizontal, this);
  tables->addWidget(buckets_);
  tables->addWidget(skipped_);
  tables->setStretchFactor(0, 1);
  tables->setStretchFactor(1, 2);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName("datasetSplitter");
  split->addWidget(thumbs_);
  split->addWidget(jsonlRows_);
  split->addWidget(tables);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(summary_);
  layout->addWidget(split, 1);
  showNotImages();
}

DatasetView::~DatasetView() {
  cancel_->store(true);
  pool_->waitForDone();
}

void DatasetView::setDatasets(const QVector<DatasetEntryView>& datasets) {
  datasets_ = datasets;
  const QSignalBlocker block(chooser_);
  chooser_->clear();
  for (int i = 0; i < datasets_.size(); ++i) chooser_->addItem(tr("Dataset %1 (%2)").arg(i + 1).arg(datasets_[i].type));
  if (chosen_ >= datasets_.size()) chosen_ = 0;
  // The first dataset with something to show, unless the user chose one.
  if (chosen_ < datasets_.size() && !datasets_[chosen_].previewable)
    for (int i = 0; i < datasets_.size(); ++i)
      if (datasets_[i].previewable) {
        chosen_ = i;
        break;
      }
  chooser_->setCurrentIndex(chosen_);
  chooser_->setVisible(datasets_.size() > 1);
  if (datasets_.isEmpty() || !datasets_[chosen_].previewable) {
    settle_->stop();
    shown_.reset();
    showNotImages();
    return;
  }
  if (shown_ && sameScan(*shown_, datasets_[chosen_])) return;
  state_->setText(tr("Scanning..."));
  settle_->start();
}

void DatasetView::chooseDataset(int index) {
  if (index < 0 || index >= datasets_.size()) return;
  chosen_ = index;
  shown_.reset();
  setDatasets(QVector<DatasetEntryView>(datasets_));
}

void DatasetView::rescan() {
  settle_->stop();
  if (chosen_ >= datasets_.size() || !datasets_[chosen_].previewable) return;
  const DatasetEntryView dataset = datasets_[chosen_];
  shown_ = std::make_unique<DatasetEntryView>(dataset);
  const bool jsonl = dataset.jsonl;
  if (dataset.path.isEmpty()) {
    DatasetScanView v;
    v.jsonl = jsonl;
    v.error = jsonl ? tr("No jsonl file set (datasets[%1].file_path).").arg(chosen_)
                    : tr("No image folder set (datasets[%1].folder_path).").arg(chosen_);
    showScan(v, ++generation_);
    return;
  }
  cancel_->store(true);  // the scan in flight (if any) is moot
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  const int generation = ++generation_;
  scanning_ = true;
  state_->setText(tr("Scanning %1...").arg(dataset.path));
  QPointer<DatasetView> self(this);
  std::shared_ptr<std::atomic<bool>> cancel = cancel_;
  pool_->start([self, dataset, cancel, generation] {
    if (cancel->load()) return;
    DatasetScanView v = scanDataset(dataset, kMaxThumbs, kThumbSide, kMaxJsonlRows, cancel.get());
    if (cancel->load()) return;
    QMetaObject::invokeMethod(
        self.data(),
        [self, v, generation] {
          if (self) self->showScan(v, generation);
        },
        Qt::QueuedConnection);
  });
}

void DatasetView::showScan(const DatasetScanView& scan, int generation) {
  if (generation != generation_) return;  // a newer scan is on its way
  scanning_ = false;
  ++scans_;
  last_ = scan;
  buckets_->clear();
  skipped_->clear();
  thumbs_->clear();
  jsonlRows_->clear();
  state_->clear();
  // A jsonl file has rows of text where a folder has thumbnails and buckets.
  thumbs_->setVisible(!scan.jsonl);
  buckets_->setVisible(!scan.jsonl);
  jsonlRows_->setVisible(scan.jsonl);
  skipped_->setVisible(true);
  skipped_->setHeaderLabels({scan.jsonl ? tr("Skipped line") : tr("Skipped file"), tr("Why")});
  if (!scan.ok && !scan.error.isEmpty() && scan.folder.isEmpty()) {
    summary_->setText(scan.error);
  } else if (scan.jsonl && !scan.ok) {
    summary_->setText(tr("Cannot read the jsonl file: %1").arg(scan.error));
  } else if (scan.jsonl) {
    QString text = tr("%1 sample(s) from %2 line(s) of %3, %4 line(s) skipped. Cuts to max_seq_len are counted "
                      "when the run starts (they need the model's tokenizer).")
                       .arg(scan.samples)
                       .arg(scan.lines)
                       .arg(scan.folder)
                       .arg(scan.skipped.size());
    // How the lines were read: the configured fields, or a common layout the reader recognised.
    QStringList read;
    for (const auto& [layout, n] : scan.layouts) read << tr("%1 (%2)").arg(layout).arg(n);
    if (!read.isEmpty()) text += tr(" Fields read: %1.").arg(read.join(", "));
    if (scan.samples > scan.rows.size()) text += tr(" The first %1 are shown.").arg(scan.rows.size());
    summary_->setText(text);
    for (const DatasetTextRow& r : scan.rows) {
      auto* item = new QTreeWidgetItem(jsonlRows_, {QString::number(r.line), r.prompt, r.response});
      item->setToolTip(1, r.prompt);
      item->setToolTip(2, r.response);
    }
    for (const DatasetSkip& s : scan.skipped) {
      auto* item = new QTreeWidgetItem(skipped_, {s.path, s.reason});
      item->setToolTip(1, s.reason);
    }
  } else if (!scan.ok) {
    summary_->setText(tr("Cannot read the folder: %1").arg(scan.error));
  } else {
    QString text = tr("%1 image(s) used in %2: %3 training view(s), %4 skipped, %5 without a caption file "
                      "(the default caption is used).")
                       .arg(scan.images)
                       .arg(scan.folder)
                       .arg(scan.entries)
                       .arg(scan.skipped.size())
                       .arg(scan.defaultedCaptions.size());
    if (scan.thumbsLeftOut) text += tr(" The first %1 are shown.").arg(scan.thumbs.size());
    summary_->setText(text);
    for (const DatasetBucketCount& b : scan.buckets)
      new QTreeWidgetItem(buckets_, {QString::number(b.resolution), b.bucket, QString::number(b.count)});
    for (const DatasetSkip& s : scan.skipped) {
      auto* item = new QTreeWidgetItem(skipped_, {QFileInfo(s.path).fileName(), s.reason});
      item->setToolTip(0, s.path);
      item->setToolTip(1, s.reason);
    }
    for (const DatasetThumb& t : scan.thumbs) {
      const QString caption = t.caption.isEmpty() ? tr("(no caption)") : t.caption;
      auto* item = new QListWidgetItem(QIcon(QPixmap::fromImage(t.image)), caption, thumbs_);
      item->setData(Qt::UserRole, t.path);
      item->setSizeHint(thumbs_->gridSize());  // long captions are cut to the tile, whole in the tooltip
      item->setTextAlignment(Qt::AlignHCenter | Qt::AlignTop);
      item->setToolTip(QString("<b>%1</b> (%2 x %3)<br>%4%5")
                           .arg(QFileInfo(t.path).fileName().toHtmlEscaped())
                           .arg(t.size.width())
                           .arg(t.size.height())
                           .arg(caption.toHtmlEscaped(), t.defaultedCaption
                                                             ? tr("<br><i>no caption file: the default caption</i>")
                                                             : QString()));
      if (t.defaultedCaption) item->setForeground(palette().color(QPalette::PlaceholderText));
    }
  }
  emit scanFinished();
}

void DatasetView::showNotImages() {
  buckets_->clear();
  skipped_->clear();
  thumbs_->clear();
  jsonlRows_->clear();
  // Nothing to list: no table stays up with the last scan's headers (a jsonl file's
  // "Prompt" and "Skipped line" over a shapes dataset).
  for (QWidget* w : std::initializer_list<QWidget*>{buckets_, skipped_, thumbs_, jsonlRows_}) w->hide();
  skipped_->setHeaderLabels({tr("Skipped file"), tr("Why")});
  state_->clear();
  last_ = DatasetScanView{};
  if (datasets_.empty())
    summary_->setText(tr("The config has no dataset."));
  else
    summary_->setText(tr("Dataset %1 is of type \"%2\": the trainer makes its items, there is no folder to show. "
                         "Set its type to images and a folder_path (or, for a language model, jsonl and a "
                         "file_path) to see its data here.")
                          .arg(chosen_ + 1)
                          .arg(datasets_[chosen_].type));
}

QString DatasetView::summaryText() const { return summary_->text(); }

}  // namespace strata::ui
