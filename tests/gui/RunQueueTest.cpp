// The Run view's extras on the real window, by objectName, offscreen: per-GPU
// use plots from a scripted source (and, without NVML, the view says why); the
// run queue trains its configs one after another, a failed one does not stop
// the rest, and it is kept (and editable) across restarts; the dark theme
// changes the palette, the plots and the GPU map, and is remembered.
#include <qcustomplot.h>

#include <sys/stat.h>

#include <QAction>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMutex>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "GuiTestSupport.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/GpuUsagePanel.h"
#include "ui/widgets/LossPlot.h"
#include "ui/app/MainWindow.h"
#include "ui/backend/RunQueue.h"
#include "ui/widgets/RunQueuePanel.h"
#include "ui/widgets/Theme.h"
#include "ui/backend/TrainerBridge.h"

using namespace strata::ui;
using namespace strata::ui::test;

namespace {

// Two cards in a split: cuda:0 works, cuda:1 waits; cuda:0's memory grows each reading.
class ScriptedSource : public GpuUsageSource {
 public:
  GpuUsageReadingView read() override {
    QMutexLocker lock(&mutex_);
    ++reads_;
    GpuUsageReadingView r;
    r.available = true;
    r.gpus << GpuUsageView{"cuda:0", "Test GPU A", 90, qint64(reads_) * 1000000000, 16000000000}
           << GpuUsageView{"cuda:1", "Test GPU B", 5, 2000000000, 16000000000};
    return r;
  }
  int reads() {
    QMutexLocker lock(&mutex_);
    return reads_;
  }

 private:
  QMutex mutex_;
  int reads_ = 0;
};

class NoDriverSource : public GpuUsageSource {
 public:
  GpuUsageReadingView read() override {
    GpuUsageReadingView r;
    r.reason = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
    return r;
  }
};

int lightness(const QPixmap& pixmap) { return pixmap.toImage().pixelColor(3, 3).lightness(); }

}  // namespace

class RunQueueTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void gpuUsagePlotsEachCardAndMarksTheWaitingOne();
  void gpuUsageSaysWhyWithoutTheDriver();
  void queueIsKeptAcrossRestartsAndEditable();
  void unreadableQueueFileIsKeptAsideAndSaid();
  void queueFileThatIsAFifoOrDeviceIsRefusedAtOnce();
  void queueTrainsInTurnAndAFailedRunDoesNotStopIt();
  void darkThemeChangesPalettePlotsAndMapAndIsRemembered();

 private:
  bool openDemo(MainWindow& w, const QString& name, const QString& runs);
  QStringList queueNames(MainWindow& w);
  QTemporaryDir tmp_;
};

void RunQueueTest::initTestCase() {
  QVERIFY(tmp_.isValid());
  QVERIFY(QDir::setCurrent(tmp_.path()));
}

bool RunQueueTest::openDemo(MainWindow& w, const QString& name, const QString& runs) {
  // The last config's edits are not kept (the window asks; the test says discard).
  if (w.configEditor()->isModified()) answerNext("saveChangesDialog", "saveChangesDiscard");
  if (!w.openConfig(demoConfig())) return false;
  ConfigEditor* e = w.configEditor();
  // Relative names are made absolute: a relative output folder would be the demo config's (the source tree).
  const QString dir = QDir::isAbsolutePath(runs) ? runs : tmp_.filePath(runs);
  return e->setValueText("job.name", name) && e->setValueText("job.training_folder", dir) &&
         e->setValueText("sample.sample_every", "0") && e->setValueText("save.save_every", "0") &&
         e->setValueText("train.lr_warmup_steps", "0") && !e->hasErrors();
}

QStringList RunQueueTest::queueNames(MainWindow& w) {
  QStringList out;
  for (const RunQueue::Entry& e : w.runQueue()->entries()) out << e.name;
  return out;
}

void RunQueueTest::gpuUsagePlotsEachCardAndMarksTheWaitingOne() {
  MainWindow w(tmp_.filePath("gpu.ini"));
  w.show();
  GpuUsagePanel* panel = child<GpuUsagePanel>(&w, "gpuUsagePanel");
  QVERIFY(panel);
  QCOMPARE(panel, w.gpuUsagePanel());
  auto source = std::make_shared<ScriptedSource>();
  panel->setSource(source, 20);
  QTRY_VERIFY_WITH_TIMEOUT(panel->readingCount() >= 6, 10000);
  QCOMPARE(panel->gpuLabels(), QStringList({"cuda:0", "cuda:1"}));
  QCustomPlot* busy0 = panel->plotFor("cuda:0");
  QCustomPlot* busy1 = panel->plotFor("cuda:1");
  QVERIFY(busy0 && busy1);
  QVERIFY(busy0->graph(0)->dataCount() >= 6);
  QCOMPARE((busy1->graph(0)->data()->constEnd() - 1)->value, 5.0);
  QCOMPARE((busy0->graph(0)->data()->constEnd() - 1)->value, 90.0);
  // Memory over time: cuda:0's grows a GB a reading (plotted in GB), cuda:1's stays at 2 GB.
  const auto mem0 = busy0->graph(1)->data();
  QVERIFY((mem0->constEnd() - 1)->value > mem0->constBegin()->value);
  QCOMPARE((busy1->graph(1)->data()->constEnd() - 1)->value, 2.0);
  QCOMPARE(busy1->yAxis2->range().upper, 16.0);
  // The waiting card says so in its header; the busy one does not.
  QCOMPARE(panel->starvedGpus(), QStringList({"cuda:1"}));
  QWidget* card1 = child<QWidget>(panel, "gpuUsage_cuda_1");
  QWidget* card0 = child<QWidget>(panel, "gpuUsage_cuda_0");
  QVERIFY(card0 && card1);
  QTRY_VERIFY(child<QLabel>(card1, "gpuUsageHeader")->text().contains("waiting"));
  QVERIFY(child<QLabel>(card1, "gpuUsageHeader")->text().contains("5% busy"));
  QVERIFY(!child<QLabel>(card0, "gpuUsageHeader")->text().contains("waiting"));
  QVERIFY(child<QLabel>(panel, "gpuUsageStatus")->text().contains("2 GPU(s)"));
  QVERIFY(panel->maximumWidth() > GpuUsagePanel::kNarrowWidth);
  // Sampling runs on its own thread and stops with the panel.
  panel->stopSampling();
  const int reads = source->reads();
  QTest::qWait(100);
  QCOMPARE(source->reads(), reads);
}

void RunQueueTest::gpuUsageSaysWhyWithoutTheDriver() {
  MainWindow w(tmp_.filePath("gpu2.ini"));
  GpuUsagePanel* panel = w.gpuUsagePanel();
  // The window's own source is NVML: on this machine it has figures, or says why not.
  QTRY_VERIFY_WITH_TIMEOUT(panel->readingCount() >= 1, 10000);
  const GpuUsageReadingView real = makeNvmlUsageSource()->read();
  if (!real.available)
    QVERIFY2(panel->statusText().contains(real.reason), qPrintable(panel->statusText()));
  else
    QCOMPARE(panel->gpuLabels().size(), real.gpus.size());

  panel->setSource(std::make_shared<NoDriverSource>(), 20);
  QTRY_VERIFY_WITH_TIMEOUT(panel->readingCount() >= 1, 10000);
  const QString status = child<QLabel>(panel, "gpuUsageStatus")->text();
  QVERIFY2(status.startsWith("No GPU figures: libnvidia-ml.so.1 not found"), qPrintable(status));
  QVERIFY(panel->gpuLabels().isEmpty());
  QCOMPARE(panel->maximumWidth(), GpuUsagePanel::kNarrowWidth);  // the loss plot gets the width
  // One reading says it; the sampler does not keep asking a missing driver.
  QTest::qWait(150);
  QCOMPARE(panel->readingCount(), 1);
}

void RunQueueTest::queueIsKeptAcrossRestartsAndEditable() {
  const QString settings = tmp_.filePath("queue-keep.ini");
  {
    MainWindow w(settings);
    w.show();
    for (const QString& name : {"first", "second", "third"}) {
      QVERIFY(openDemo(w, name, "runs-keep"));
      child<QPushButton>(&w, "addToQueueButton")->click();
    }
    QCOMPARE(queueNames(w), QStringList({"first", "second", "third"}));
    auto* list = child<QTreeWidget>(&w, "runQueueList");
    QCOMPARE(list->topLevelItemCount(), 3);
    QCOMPARE(list->topLevelItem(0)->text(1), QString("waiting"));
    // "third" two up, then "first" off the queue.
    list->setCurrentItem(list->topLevelItem(2));
    child<QPushButton>(&w, "queueUpButton")->click();
    child<QPushButton>(&w, "queueUpButton")->click();
    QCOMPARE(queueNames(w), QStringList({"third", "first", "second"}));
    QVERIFY(!child<QPushButton>(&w, "queueUpButton")->isEnabled());  // at the top
    list->setCurrentItem(list->topLevelItem(1));
    QCOMPARE(list->currentItem()->text(0), QString("first"));
    child<QPushButton>(&w, "queueRemoveButton")->click();
    QCOMPARE(queueNames(w), QStringList({"third", "second"}));
    // A config with errors is not queued.
    w.configEditor()->setValueText("train.lr", "-1");
    QVERIFY(w.configEditor()->hasErrors());
    QVERIFY(!child<QPushButton>(&w, "addToQueueButton")->isEnabled());
    QVERIFY(!child<QAction>(&w, "addToQueueAction")->isEnabled());
    auto answer = answerNext("errorDialog", "");
    QVERIFY(!w.addToQueue());  // called directly it says why
    QTRY_VERIFY(answer->answered);
    QCOMPARE(w.runQueue()->entries().size(), 2);
    w.configEditor()->setValueText("train.lr", "0.003");
    auto discard = answerNext("saveChangesDialog", "saveChangesDiscard");
    QVERIFY(w.close());
  }
  // The file is the queue: JSON, with the config text of each entry.
  const QString file = tmp_.filePath("queue-keep-queue.json");
  QFile f(file);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QJsonObject root = QJsonDocument::fromJson(f.readAll()).object();
  QCOMPARE(root.value("version").toInt(), RunQueue::kFormatVersion);
  QCOMPARE(root.value("entries").toArray().size(), 2);
  QVERIFY(root.value("entries").toArray()[0].toObject().value("yaml").toString().contains("name: third"));
  f.close();

  MainWindow again(settings);
  QCOMPARE(queueNames(again), QStringList({"third", "second"}));
  QCOMPARE(child<QTreeWidget>(&again, "runQueueList")->topLevelItemCount(), 2);
  QVERIFY(again.runQueue()->loadProblem().isEmpty());
  QVERIFY(!again.isQueueRunning());  // a restart does not start training by itself

  // A run that was training when the app closed comes back as stopped, with its folder.
  QJsonArray entries = root.value("entries").toArray();
  QJsonObject running = entries[0].toObject();
  running["state"] = "running";
  running["run_dir"] = tmp_.filePath("runs-keep/third");
  entries[0] = running;
  QJsonObject edited = root;
  edited["entries"] = entries;
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(QJsonDocument(edited).toJson());
  f.close();
  RunQueue reread(file);
  QCOMPARE(reread.entries().size(), 2);
  QCOMPARE(reread.entries()[0].state, RunQueue::State::Stopped);
  QVERIFY(reread.entries()[0].message.contains("closed during this run"));
  QCOMPARE(reread.entries()[0].runDir, tmp_.filePath("runs-keep/third"));
}

void RunQueueTest::unreadableQueueFileIsKeptAsideAndSaid() {
  const QString settings = tmp_.filePath("queue-bad.ini");
  const QString file = tmp_.filePath("queue-bad-queue.json");
  QFile f(file);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write("{\"version\": 1, \"entries\": [ {\"id\": ");
  f.close();
  MainWindow w(settings);
  QVERIFY(w.runQueue()->entries().isEmpty());
  const QString summary = child<QLabel>(&w, "runQueueSummary")->text();
  QVERIFY2(summary.contains("could not be read") && summary.contains(file + ".bad"), qPrintable(summary));
  QVERIFY(QFileInfo::exists(file + ".bad"));
  QVERIFY(!QFileInfo::exists(file));  // the next save writes a fresh one, the old text stays aside
}

// Issue 32: a FIFO as the queue file kept the app from ever showing its window, a
// link to /dev/zero grew it to 9.6 GB. Both are refused before any read, and said.
void RunQueueTest::queueFileThatIsAFifoOrDeviceIsRefusedAtOnce() {
  const QString fifo = tmp_.filePath("queue-fifo.json");
  QCOMPARE(::mkfifo(fifo.toLocal8Bit().constData(), 0600), 0);
  const QString zero = tmp_.filePath("queue-zero.json");
  QVERIFY(QFile::link("/dev/zero", zero));
  for (const QString& file : {fifo, zero}) {
    QElapsedTimer timer;
    timer.start();
    RunQueue queue(file);
    QVERIFY(timer.elapsed() < 5000);
    QVERIFY(queue.entries().isEmpty());
    QVERIFY2(queue.loadProblem().contains("not a regular file"), qPrintable(queue.loadProblem()));
  }
}

void RunQueueTest::queueTrainsInTurnAndAFailedRunDoesNotStopIt() {
  MainWindow w(tmp_.filePath("queue-run.ini"));
  w.show();
  w.setStepLimit(3);
  // The middle config's run folder cannot be made: a file sits where its training folder goes.
  QFile blocker(tmp_.filePath("blocked"));
  QVERIFY(blocker.open(QIODevice::WriteOnly));
  blocker.close();
  QVERIFY(openDemo(w, "q_one", "runs-queue"));
  w.addToQueue();
  QVERIFY(openDemo(w, "q_broken", tmp_.filePath("blocked")));
  w.addToQueue();
  QVERIFY(openDemo(w, "q_three", "runs-queue"));
  w.addToQueue();
  QCOMPARE(w.runQueue()->entries().size(), 3);

  QSignalSpy notified(&w, &MainWindow::notified);
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  child<QPushButton>(&w, "queueRunButton")->click();
  QVERIFY(w.isQueueRunning());
  QTRY_VERIFY_WITH_TIMEOUT(!w.isQueueRunning(), 240000);
  const auto& e = w.runQueue()->entries();
  QCOMPARE(e[0].state, RunQueue::State::Finished);
  QVERIFY2(e[1].state == RunQueue::State::Failed, qPrintable(RunQueue::stateName(e[1].state) + ": " + e[1].message));
  QVERIFY2(e[1].message.contains("blocked"), qPrintable(e[1].message));  // says why: its folder
  QCOMPARE(e[2].state, RunQueue::State::Finished);
  QVERIFY(QFileInfo(e[0].runDir).isDir());
  QVERIFY(QFileInfo(e[2].runDir).isDir());
  QVERIFY(e[0].runDir.endsWith("q_one") && e[2].runDir.endsWith("q_three"));
  QVERIFY(e[0].message.contains("3 steps"));
  // One after another: the second finished run started after the first finished.
  QVERIFY(started.count() >= 2);
  QTRY_VERIFY(!notified.isEmpty());
  QCOMPARE(notified.last().at(0).toString(), QString("Run queue done"));
  QVERIFY(notified.last().at(1).toString().contains("2 finished, 1 failed"));
  auto* list = child<QTreeWidget>(&w, "runQueueList");
  QCOMPARE(list->topLevelItem(1)->text(1), QString("failed"));
  // Run again puts the failed one back; Clear done empties the rest.
  list->setCurrentItem(list->topLevelItem(1));
  QVERIFY(child<QPushButton>(&w, "queueAgainButton")->isEnabled());
  child<QPushButton>(&w, "queueAgainButton")->click();
  QCOMPARE(w.runQueue()->entries()[1].state, RunQueue::State::Waiting);
  child<QPushButton>(&w, "queueClearDoneButton")->click();
  QCOMPARE(queueNames(w), QStringList({"q_broken"}));
}

void RunQueueTest::darkThemeChangesPalettePlotsAndMapAndIsRemembered() {
  const QString settings = tmp_.filePath("theme.ini");
  {
    MainWindow w(settings);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openConfig(demoConfig()));
    auto* dark = child<QAction>(&w, "darkThemeAction");
    QVERIFY(dark && dark->isCheckable() && !dark->isChecked());
    const int lightWindow = QApplication::palette().color(QPalette::Window).lightness();
    const int lightPlot = lightness(w.lossPlot()->plot()->toPixmap(120, 80));
    QVERIFY(lightWindow > 128 && lightPlot > 128);
    dark->trigger();
    QCOMPARE(w.theme(), Theme::Dark);
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 100);
    QVERIFY(w.palette().color(QPalette::Base).lightness() < 100);
    // The plots and the map follow (after the palette change reaches them).
    QTRY_VERIFY(lightness(w.lossPlot()->plot()->toPixmap(120, 80)) < 100);
    w.tabs()->setCurrentIndex(0);
    QTRY_VERIFY(lightness(w.plannedMap()->canvas()->grab()) < 100);
    QVERIFY(!w.plannedMap()->placement().devices.isEmpty());
    auto* gpuUsage = w.gpuUsagePanel();
    gpuUsage->setSource(std::make_shared<ScriptedSource>(), 20);
    QTRY_VERIFY(gpuUsage->plotFor("cuda:0"));
    QTRY_VERIFY(lightness(gpuUsage->plotFor("cuda:0")->toPixmap(120, 80)) < 100);
  }
  {
    MainWindow w(settings);  // remembered
    QCOMPARE(w.theme(), Theme::Dark);
    QVERIFY(child<QAction>(&w, "darkThemeAction")->isChecked());
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 100);
    child<QAction>(&w, "darkThemeAction")->trigger();  // back to light
    QCOMPARE(w.theme(), Theme::Light);
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() > 128);
    QTRY_VERIFY(lightness(w.lossPlot()->plot()->toPixmap(120, 80)) > 128);
  }
  MainWindow w(settings);
  QCOMPARE(w.theme(), Theme::Light);
  QVERIFY(!child<QAction>(&w, "darkThemeAction")->isChecked());
}

STRATA_GUI_TEST_MAIN(RunQueueTest)
#include "RunQueueTest.moc"
