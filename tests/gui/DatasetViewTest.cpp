// The Setup tab's dataset view on the real window, by objectName, offscreen, on a
// folder the test writes: thumbnails with their captions (trigger word and
// default caption applied), the image count, the bucket counts, the skipped
// files with why (a corrupt, an empty and a too-small image), the image without
// a caption; scanned again when folder_path, resolution or caption_ext change.
#include <QColor>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "GuiTestSupport.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/setup/DatasetView.h"
#include "ui/app/MainWindow.h"

using namespace strata::ui;
using namespace strata::ui::test;

class DatasetViewTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void showsImagesCaptionsBucketsAndSkips();
  void notAnImagesDatasetSaysSo();

 private:
  void writeImage(const QString& path, int w, int h, QColor c);
  void writeText(const QString& path, const QByteArray& text);
  QTemporaryDir tmp_;
};

void DatasetViewTest::initTestCase() {
  QVERIFY(tmp_.isValid());
  QVERIFY(QDir::setCurrent(tmp_.path()));
}

void DatasetViewTest::writeImage(const QString& path, int w, int h, QColor c) {
  QImage img(w, h, QImage::Format_RGB888);
  img.fill(c);
  QVERIFY(img.save(path));
}

void DatasetViewTest::writeText(const QString& path, const QByteArray& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text);
}

void DatasetViewTest::showsImagesCaptionsBucketsAndSkips() {
  const QString dir = tmp_.filePath("photos");
  QVERIFY(QDir().mkpath(dir));
  writeImage(dir + "/wide.png", 96, 64, Qt::red);
  writeText(dir + "/wide.txt", "a red [trigger] on a table");
  writeImage(dir + "/tall.jpg", 64, 96, Qt::blue);  // no caption file
  writeImage(dir + "/square.png", 64, 64, Qt::green);
  writeText(dir + "/square.txt", "a green square");
  writeImage(dir + "/tiny.png", 8, 8, Qt::white);  // smaller than the smallest bucket
  writeText(dir + "/empty.png", "");               // zero bytes
  QFile good(dir + "/square.png");
  QVERIFY(good.open(QIODevice::ReadOnly));
  writeText(dir + "/broken.png", good.read(good.size() / 2));  // truncated
  writeText(dir + "/square.caption", "other caption");

  MainWindow w(tmp_.filePath("dataset.ini"));
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  DatasetView* view = child<DatasetView>(&w, "datasetView");
  QVERIFY(view);
  auto* sideTabs = child<QTabWidget>(&w, "setupSideTabs");
  sideTabs->setCurrentWidget(view);
  // The demo's dataset is drawn by the trainer: nothing to scan.
  QVERIFY2(view->summaryText().contains("shapes"), qPrintable(view->summaryText()));

  QSignalSpy scanned(view, &DatasetView::scanFinished);
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->setValueText("datasets[0].type", "images"));
  QVERIFY(e->setValueText("datasets[0].caption_ext", "txt"));
  QVERIFY(e->setValueText("datasets[0].default_caption", "a photo"));
  QVERIFY(e->setValueText("datasets[0].trigger_word", "sks"));
  QVERIFY(e->setValueText("datasets[0].resolution", "[64]"));
  QVERIFY(e->setValueText("datasets[0].folder_path", dir));
  QTRY_VERIFY_WITH_TIMEOUT(scanned.count() >= 1 && !view->isScanning(), 30000);
  const int settledScans = view->scanCount();

  const DatasetScanView& scan = view->lastScan();
  QVERIFY2(scan.ok, qPrintable(scan.error));
  QCOMPARE(scan.images, 3);
  QCOMPARE(scan.defaultedCaptions.size(), 1);
  QVERIFY(scan.defaultedCaptions.front().endsWith("tall.jpg"));
  QVERIFY2(view->summaryText().contains("3 image(s) used") && view->summaryText().contains("3 skipped") &&
               view->summaryText().contains("1 without a caption file"),
           qPrintable(view->summaryText()));

  // Thumbnails with the captions as trained.
  auto* thumbs = child<QListWidget>(view, "datasetThumbnails");
  QCOMPARE(thumbs->count(), 3);
  QMap<QString, QString> captions;
  for (int i = 0; i < thumbs->count(); ++i) {
    QListWidgetItem* item = thumbs->item(i);
    captions[QFileInfo(item->data(Qt::UserRole).toString()).fileName()] = item->text();
    QVERIFY(!item->icon().isNull());
    const QSize size = item->icon().availableSizes().value(0);
    QVERIFY(size.width() <= DatasetView::kThumbSide && size.height() <= DatasetView::kThumbSide);
  }
  QCOMPARE(captions.value("wide.png"), QString("a red sks on a table"));
  QCOMPARE(captions.value("tall.jpg"), QString("sks, a photo"));
  QCOMPARE(captions.value("square.png"), QString("sks, a green square"));
  QVERIFY(thumbs->item(0)->toolTip().contains("x"));

  // Skipped files, each with why.
  auto* skipped = child<QTreeWidget>(view, "datasetSkipped");
  QCOMPARE(skipped->topLevelItemCount(), 3);
  QMap<QString, QString> why;
  for (int i = 0; i < skipped->topLevelItemCount(); ++i)
    why[skipped->topLevelItem(i)->text(0)] = skipped->topLevelItem(i)->text(1);
  QVERIFY2(why.value("tiny.png").contains("too small"), qPrintable(why.value("tiny.png")));
  QVERIFY2(!why.value("empty.png").isEmpty(), "the empty file says why");
  QVERIFY2(!why.value("broken.png").isEmpty(), "the truncated file says why");

  // Bucket counts: one row per resolution and bucket, summing to the views.
  auto* buckets = child<QTreeWidget>(view, "datasetBuckets");
  // 96x64, 64x96 and 64x64 go to a landscape, a portrait and the square bucket.
  QCOMPARE(buckets->topLevelItemCount(), 3);
  qint64 views = 0;
  for (int i = 0; i < buckets->topLevelItemCount(); ++i) {
    QCOMPARE(buckets->topLevelItem(i)->text(0), QString("64"));
    views += buckets->topLevelItem(i)->text(2).toLongLong();
  }
  QCOMPARE(views, scan.entries);
  QCOMPARE(views, 3);

  // A second resolution: every used image gets a view at each.
  QVERIFY(e->setValueText("datasets[0].resolution", "[32, 64]"));
  QTRY_VERIFY_WITH_TIMEOUT(view->scanCount() > settledScans && !view->isScanning(), 30000);
  QCOMPARE(view->lastScan().entries, 6);
  bool has32 = false;
  for (int i = 0; i < buckets->topLevelItemCount(); ++i) has32 |= buckets->topLevelItem(i)->text(0) == "32";
  QVERIFY(has32);

  // Another caption extension: only square has a .caption file.
  int before = view->scanCount();
  QVERIFY(e->setValueText("datasets[0].caption_ext", "caption"));
  QTRY_VERIFY_WITH_TIMEOUT(view->scanCount() > before && !view->isScanning(), 30000);
  QCOMPARE(view->lastScan().defaultedCaptions.size(), 2);

  // A key that does not change what is shown does not scan again.
  before = view->scanCount();
  QVERIFY(e->setValueText("datasets[0].num_repeats", "3"));
  QTest::qWait(DatasetView::kSettleMs + 300);
  QCOMPARE(view->scanCount(), before);

  // Another folder.
  const QString other = tmp_.filePath("other");
  QVERIFY(QDir().mkpath(other));
  writeImage(other + "/one.png", 64, 64, Qt::yellow);
  before = view->scanCount();
  QVERIFY(e->setValueText("datasets[0].folder_path", other));
  QTRY_VERIFY_WITH_TIMEOUT(view->scanCount() > before && !view->isScanning(), 30000);
  QCOMPARE(view->lastScan().images, 1);
  QCOMPARE(child<QListWidget>(view, "datasetThumbnails")->count(), 1);
  QCOMPARE(skipped->topLevelItemCount(), 0);

  // Files added on disk show after Rescan.
  writeImage(other + "/two.png", 64, 64, Qt::cyan);
  before = view->scanCount();
  child<QPushButton>(view, "datasetRescan")->click();
  QTRY_VERIFY_WITH_TIMEOUT(view->scanCount() > before && !view->isScanning(), 30000);
  QCOMPARE(view->lastScan().images, 2);

  // A folder that does not exist says so.
  before = view->scanCount();
  QVERIFY(e->setValueText("datasets[0].folder_path", tmp_.filePath("missing")));
  QTRY_VERIFY_WITH_TIMEOUT(view->scanCount() > before && !view->isScanning(), 30000);
  QVERIFY2(view->summaryText().startsWith("Cannot read the folder"), qPrintable(view->summaryText()));
  answerNext("saveChangesDialog", "saveChangesDiscard");
  w.close();
}

void DatasetViewTest::notAnImagesDatasetSaysSo() {
  MainWindow w(tmp_.filePath("dataset2.ini"));
  QVERIFY(w.openConfig(demoConfig()));
  DatasetView* view = w.datasetView();
  QVERIFY(view->summaryText().contains("\"shapes\""));
  QVERIFY(child<QListWidget>(view, "datasetThumbnails")->count() == 0);
  QCOMPARE(view->scanCount(), 0);
}

STRATA_GUI_TEST_MAIN(DatasetViewTest)
#include "DatasetViewTest.moc"
