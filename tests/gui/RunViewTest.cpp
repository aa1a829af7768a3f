// The run view tells the truth, on the real window driven by objectName,
// offscreen, with the demo training on the CPU: the header while paused,
// requests made while paused say they wait, the time left is smoothed, closing
// during a run asks stop-or-keep, a finished run notifies, a reopened run shows
// its last step, loss history and placement, recent run folders are absolute,
// the export offers the run's one exports folder, the tabs have shortcuts, and
// a model streamed in before step 1 (T5, then the transformer, of the
// flux_pipeline_a fixture) and the images run's cache show what loads or is
// encoded and how far, cleared when training starts.
#include <QAction>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QRegularExpression>
#include <QPushButton>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>

#include "DemoRunSupport.h"
#include "GuiTestSupport.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/dialogs/ExportDialog.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"
#include "ui/app/MainWindow.h"
#include "ui/backend/TrainerBridge.h"

using namespace strata::ui;
using namespace strata::ui::test;

class RunViewTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void tabsAndRunControlsHaveShortcuts();
  void etaIsSmoothed();
  void pausedRunSaysSoAndQueuedRequestsWait();
  void closingDuringARunAsksStopOrKeep();
  void finishedRunNotifiesAndReopensWithItsHistory();
  void stoppedRunResumesAndExportsAnyCheckpointAskingBeforeReplacing();
  void modelLoadAndCacheShowWhatAndHowFar();

 private:
  // A copy of the demo in the temp folder, writing under `runs` (relative: to the
  // config's folder; the tests run in another folder), sampling every 2 steps.
  bool openDemo(MainWindow& w, const QString& runs, int sampleEvery = 2);
  QTemporaryDir tmp_;
  QString settings_;
};

void RunViewTest::initTestCase() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("run-test.ini");
  // The working folder is not the config's: a relative output folder must not land here.
  QVERIFY(QDir(tmp_.path()).mkpath("cwd"));
  QVERIFY(QDir::setCurrent(tmp_.filePath("cwd")));
}

bool RunViewTest::openDemo(MainWindow& w, const QString& runs, int sampleEvery) {
  return openDemoForRun(w, tmp_.filePath("demo.yaml"), runs, sampleEvery);
}

void RunViewTest::tabsAndRunControlsHaveShortcuts() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  w.activateWindow();
  QVERIFY(QTest::qWaitForWindowActive(&w));
  for (int i : {1, 2, 0}) {
    QTest::keyClick(&w, Qt::Key(Qt::Key_1 + i), Qt::ControlModifier);
    QTRY_COMPARE(w.tabs()->currentIndex(), i);
  }
  QCOMPARE(w.findChild<QAction*>("startAction")->shortcut(), QKeySequence("Ctrl+R"));
  QCOMPARE(w.findChild<QAction*>("pauseAction")->shortcut(), QKeySequence("Ctrl+P"));
  QCOMPARE(w.findChild<QAction*>("stopAction")->shortcut(), QKeySequence("Ctrl+."));
}

void RunViewTest::etaIsSmoothed() {
  MainWindow w(settings_);
  // The trainer's estimates as the issue measured them: 4:15, 2:43, 3:57.
  emit w.bridge()->progress(10, 1000, 100, 255);
  QCOMPARE(w.shownEtaSeconds(), 255.0);
  emit w.bridge()->progress(11, 1000, 100, 163);
  const double second = w.shownEtaSeconds();
  emit w.bridge()->progress(12, 1000, 100, 237);
  const double third = w.shownEtaSeconds();
  QVERIFY2(255 - second < 20, qPrintable(QString::number(second)));
  QVERIFY2(std::abs(third - second) < 10, qPrintable(QString::number(third)));
  QVERIFY(third < 255 && third > 163);
  // The time per step the header shows is the one the time left is made of: they agree.
  emit w.bridge()->progress(13, 1000, 40, 240);  // a quick last step does not make them disagree
  const double left = double(1000 - 13);
  QVERIFY2(std::abs(w.shownStepMs() * left / 1000.0 - w.shownEtaSeconds()) < 1e-6,
           qPrintable(QString("%1 ms x %2 steps vs %3 s").arg(w.shownStepMs()).arg(left).arg(w.shownEtaSeconds())));
  QVERIFY(w.shownStepMs() > 200);  // about 240 s / 987 steps, not the last step's 40 ms
}

void RunViewTest::pausedRunSaysSoAndQueuedRequestsWait() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-pause", 1000));
  w.setStepLimit(2000);
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 60000);
  QTRY_VERIFY_WITH_TIMEOUT(w.lossPlot()->plottedPointCount() >= 3, 90000);
  QVERIFY(w.runHeader().startsWith("Training"));

  child<QPushButton>(&w, "pauseButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(w.bridge()->state() == TrainerBridge::State::Paused, 30000);
  QVERIFY2(w.runHeader().startsWith("Paused at step"), qPrintable(w.runHeader()));
  QVERIFY(!w.runHeader().contains("left"));
  // Later progress ticks do not turn it back into "Training ... left".
  QTest::qWait(2 * TrainerBridge::kDrainIntervalMs + 50);
  QVERIFY2(w.runHeader().startsWith("Paused"), qPrintable(w.runHeader()));
  // A sample asked for while paused says it waits.
  QSignalSpy samples(w.bridge(), &TrainerBridge::sampleReady);
  child<QPushButton>(&w, "sampleNowButton")->click();
  QVERIFY2(w.runHeader().contains("a sample") && w.runHeader().contains("once training goes on"),
           qPrintable(w.runHeader()));
  QTest::qWait(500);
  QCOMPARE(samples.count(), 0);

  child<QPushButton>(&w, "pauseButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(samples.count() >= 1, 60000);
  QTRY_VERIFY(!w.runHeader().contains("a sample"));
  QTRY_VERIFY(w.runHeader().startsWith("Training"));
  child<QPushButton>(&w, "stopButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(!w.bridge()->isActive(), 60000);
}

void RunViewTest::closingDuringARunAsksStopOrKeep() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-close", 1000));
  QVERIFY(w.saveConfig(tmp_.filePath("close.yaml")));  // nothing unsaved: only the run is asked about
  w.setStepLimit(2000);
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 60000);
  // Keep training: the window stays, the run goes on.
  auto a = answerNext("closeDuringRunDialog", "keepTraining");
  QVERIFY(!w.close());
  QVERIFY(a->answered);
  QVERIFY2(a->text.contains("Training is still running"), qPrintable(a->text));
  QVERIFY(w.isVisible());
  QVERIFY(w.bridge()->isActive());
  // Stop once a step is trained (before step 1 nothing is, and no checkpoint is
  // written): a checkpoint is saved, then the window closes by itself.
  QSignalSpy progressed(w.bridge(), &TrainerBridge::progress);
  QTRY_VERIFY_WITH_TIMEOUT(!progressed.isEmpty() && progressed.back().at(0).toLongLong() >= 1, 60000);
  QSignalSpy stopped(w.bridge(), &TrainerBridge::stopped);
  a = answerNext("closeDuringRunDialog", "stopAndClose");
  w.close();
  QVERIFY(a->answered);
  QTRY_VERIFY_WITH_TIMEOUT(stopped.count() == 1, 60000);
  QVERIFY(!stopped.front().at(1).toString().isEmpty());  // the checkpoint kept
  QTRY_VERIFY_WITH_TIMEOUT(!w.isVisible(), 30000);
}

void RunViewTest::finishedRunNotifiesAndReopensWithItsHistory() {
  QString runDir;
  qint64 lastStep = 0;
  {
    MainWindow w(settings_);
    w.show();
    QVERIFY(openDemo(w, "runs-finish", 3));
    w.setStepLimit(6);
    QSignalSpy notified(&w, &MainWindow::notified);
    QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
    child<QPushButton>(&w, "startButton")->click();
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
    QTRY_VERIFY(!w.bridge()->isActive());
    // The Run view said once how the base was held (the demo: fp32 on the CPU, eager).
    auto* setup = child<QLabel>(&w, "runSetup");
    QVERIFY(setup->isVisible());
    QVERIFY2(setup->text().startsWith("How it runs: base fp32; LoRA float32; on the CPU"), qPrintable(setup->text()));
    QVERIFY2(setup->text().contains("eager steps"), qPrintable(setup->text()));
    QCOMPARE(notified.count(), 1);
    QCOMPARE(notified.front().at(0).toString(), QString("Training finished"));
    // A relative training_folder is the config's folder's (not the working folder's), kept absolute.
    runDir = w.recentRunFolders().front();
    QVERIFY2(QFileInfo(runDir).isAbsolute(), qPrintable(runDir));
    QCOMPARE(QFileInfo(runDir).absolutePath(), QDir(tmp_.filePath("runs-finish")).absolutePath());
    QVERIFY(!QFileInfo::exists(tmp_.filePath("cwd/runs-finish")));
    // The plot takes points on its own timer (it batches them): the last step shows
    // within a tick of `finished`, not necessarily before it.
    QTRY_COMPARE_WITH_TIMEOUT(w.lossPlot()->lastStep(), qint64(6), 5000);
    lastStep = w.lossPlot()->lastStep();
    // Export offers the run's exports folder (where the trainer wrote its files too).
    child<QPushButton>(&w, "exportButton")->click();
    auto* dialog = w.findChild<ExportDialog*>("exportDialog");
    QVERIFY(dialog);
    QCOMPARE(QDir(child<QLineEdit>(dialog, "exportDir")->text()), QDir(QDir(runDir).filePath("exports")));
    QVERIFY(QDir(QDir(runDir).filePath("exports")).exists());
    dialog->reject();
  }
  // From another folder, a new window: the recent run opens with its history.
  QVERIFY(QDir::setCurrent(QDir::rootPath()));
  MainWindow again(settings_);
  again.show();
  QCOMPARE(again.recentRunFolders().front(), runDir);
  QVERIFY(again.openRunFolder(again.recentRunFolders().front()));
  QCOMPARE(again.tabs()->currentIndex(), 1);
  auto* progress = child<QProgressBar>(&again, "runProgress");
  QCOMPARE(progress->value(), 6);
  QCOMPARE(progress->maximum(), 6);
  QVERIFY(again.lossPlot()->plottedPointCount() >= 6);
  QVERIFY2(again.runHeader().contains("finished") && again.runHeader().contains("6 of 6"),
           qPrintable(again.runHeader()));
  QVERIFY(!again.liveMap()->placement().devices.isEmpty());
  QVERIFY(!child<QPushButton>(&again, "resumeRunButton")->isEnabled());  // finished: nothing to resume
  QVERIFY(QDir::setCurrent(tmp_.filePath("cwd")));
}

// After Stop: Resume run goes on from the run folder's last checkpoint. Export
// lists every checkpoint, names the files with the step, and asks before it
// replaces one (keep both writes a new name). save.export_every writes a LoRA
// file at every N steps into the run folder.
void RunViewTest::stoppedRunResumesAndExportsAnyCheckpointAskingBeforeReplacing() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-resume", 1000));
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->setValueText("save.save_every", "2"));
  QVERIFY(e->setValueText("save.export_every", "2"));
  QVERIFY(e->setValueText("save.export_formats", "[diffusers]"));
  QVERIFY(e->setValueText("save.max_step_saves_to_keep", "10"));
  w.setStepLimit(2000);
  auto* resume = child<QPushButton>(&w, "resumeRunButton");
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  QSignalSpy stopped(w.bridge(), &TrainerBridge::stopped);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 60000);
  QVERIFY(!resume->isEnabled());  // not while a run trains
  QTRY_VERIFY_WITH_TIMEOUT(w.lossPlot()->lastStep() >= 5, 90000);
  child<QPushButton>(&w, "stopButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(stopped.count() == 1 && !w.bridge()->isActive(), 60000);
  const qint64 stoppedAt = stopped.front().at(0).toLongLong();
  QVERIFY(resume->isEnabled());
  QVERIFY2(w.runHeader().contains("Resume run"), qPrintable(w.runHeader()));
  const QString runDir = w.recentRunFolders().front();
  // export_every 2: a LoRA file at step 2 and 4, named with the step.
  QVERIFY(QFileInfo::exists(runDir + "/exports/demo_shapes_step2_diffusers.safetensors"));
  QVERIFY(QFileInfo::exists(runDir + "/exports/demo_shapes_step4_diffusers.safetensors"));

  // Resume run: from the last checkpoint (the stop's), in the same folder.
  resume->click();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 2, 60000);
  QCOMPARE(started.back().at(0).toString(), runDir);
  QCOMPARE(started.back().at(1).toLongLong(), stoppedAt);
  QVERIFY(started.back().at(3).toBool());
  QTRY_VERIFY_WITH_TIMEOUT(w.lossPlot()->lastStep() > stoppedAt, 60000);
  child<QPushButton>(&w, "stopButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(stopped.count() == 2 && !w.bridge()->isActive(), 60000);

  // Export: every checkpoint, the latest first; the oldest one picked.
  child<QPushButton>(&w, "exportButton")->click();
  auto* dialog = w.findChild<ExportDialog*>("exportDialog");
  QVERIFY(dialog);
  auto* pick = child<QComboBox>(dialog, "exportCheckpoint");
  QVERIFY(pick->count() >= 3);
  QVERIFY(pick->itemText(0).contains("latest"));
  pick->setCurrentIndex(pick->count() - 1);
  QCOMPARE(dialog->step(), qint64(2));
  const QString out = tmp_.filePath("exported-any");
  child<QLineEdit>(dialog, "exportDir")->setText(out);
  QSignalSpy exported(w.bridge(), &TrainerBridge::exportFinished);
  child<QPushButton>(dialog, "exportOk")->click();
  QTRY_VERIFY_WITH_TIMEOUT(exported.count() == 1, 60000);
  QVERIFY2(exported.back().at(0).toBool(), qPrintable(exported.back().at(1).toString()));
  QCOMPARE(exported.back().at(2).toStringList(), QStringList({out + "/demo_shapes_step2_diffusers.safetensors"}));
  QTRY_VERIFY(!w.bridge()->isActive());

  auto again = [&](const QString& answer) {
    QTest::qWait(50);  // the last dialog is deleted
    child<QPushButton>(&w, "exportButton")->click();
    auto* d = w.findChild<ExportDialog*>("exportDialog");
    child<QComboBox>(d, "exportCheckpoint")->setCurrentIndex(child<QComboBox>(d, "exportCheckpoint")->count() - 1);
    child<QLineEdit>(d, "exportDir")->setText(out);
    auto a = answerNext("exportExistsDialog", answer);
    child<QPushButton>(d, "exportOk")->click();
    return a;
  };
  // The same again: asked first; Cancel writes nothing.
  auto a = again("exportCancelReplace");
  QTRY_VERIFY(a->answered);
  QVERIFY2(a->text.contains("demo_shapes_step2_diffusers.safetensors"), qPrintable(a->text));
  QTest::qWait(300);
  QCOMPARE(exported.count(), 1);
  QVERIFY(!w.bridge()->isActive());
  // Keep both: a new name beside it, said so.
  a = again("exportKeepBoth");
  QTRY_VERIFY(a->answered);
  QTRY_VERIFY_WITH_TIMEOUT(exported.count() == 2, 60000);
  QCOMPARE(exported.back().at(2).toStringList(), QStringList({out + "/demo_shapes_step2_diffusers-2.safetensors"}));
  QVERIFY2(exported.back().at(1).toString().contains("-2.safetensors"), qPrintable(exported.back().at(1).toString()));
  QTRY_VERIFY(!w.bridge()->isActive());
  // Replace: the same name, written again.
  a = again("exportReplace");
  QTRY_VERIFY(a->answered);
  QTRY_VERIFY_WITH_TIMEOUT(exported.count() == 3, 60000);
  QCOMPARE(exported.back().at(2).toStringList(), QStringList({out + "/demo_shapes_step2_diffusers.safetensors"}));
  QTRY_VERIFY(!w.bridge()->isActive());
}

namespace {

int jsonInt(const QString& path, const char* key) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return -1;
  return QJsonDocument::fromJson(f.readAll()).object().value(key).toInt(-1);
}

// What the window showed when one load event came in.
struct LoadSeen {
  QString what;
  qint64 done = 0, total = 0;
  QString header, bar, status, line;
};

}  // namespace

void RunViewTest::modelLoadAndCacheShowWhatAndHowFar() {
  const QString model = sourceFile("tests/fixtures/reference/flux_pipeline_a/model");
  if (!QFileInfo::exists(model + "/model_index.json")) QSKIP("no flux_pipeline_a fixture");
  // Units per component: its blocks, then the rest of it (from the fixture's own configs).
  const int t5Units = jsonInt(model + "/text_encoder_2/config.json", "num_layers") + 1;
  const int transformerUnits = jsonInt(model + "/transformer/config.json", "num_layers") +
                               jsonInt(model + "/transformer/config.json", "num_single_layers") + 1;
  QVERIFY(t5Units > 1 && transformerUnits > 1);
  // An images run on the CPU: T5 (quantized, model.quantize_te) caches the captions, then the transformer loads.
  QDir().mkpath(tmp_.filePath("load-images"));
  for (int i = 0; i < 3; ++i) {
    QImage img(48, 40, QImage::Format_RGB32);
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) img.setPixel(x, y, qRgb(x * 5, y * 6, 60 * i));
    QVERIFY(img.save(tmp_.filePath(QString("load-images/p%1.png").arg(i))));
    QFile caption(tmp_.filePath(QString("load-images/p%1.txt").arg(i)));
    QVERIFY(caption.open(QIODevice::WriteOnly));
    caption.write(QString("picture %1").arg(i).toUtf8());
  }
  const QString yaml = QString(
                           "job: {name: load-view, training_folder: runs-load}\n"
                           "model: {name_or_path: '%1', device: cpu, quantize_te: true, qtype: int8}\n"
                           "network: {linear: 2, linear_alpha: 2}\n"
                           "train: {steps: 2, dtype: fp32, gradient_checkpointing: false}\n"
                           "datasets: [{type: images, folder_path: '%2', resolution: [32], "
                           "cache_latents_to_disk: false}]\n"
                           "sample: {sample_every: 0, prompts: []}\n"
                           "save: {save_every: 0, export_formats: [diffusers]}\n")
                           .arg(model, tmp_.filePath("load-images"));
  QFile f(tmp_.filePath("load.yaml"));
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(yaml.toUtf8());
  f.close();

  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(tmp_.filePath("load.yaml")));
  QVERIFY2(!w.configEditor()->hasErrors(), qPrintable(w.configEditor()->yamlText()));
  auto* bar = child<QProgressBar>(&w, "runProgress");
  // Connected after the window's own slot: sees what the window shows for each event.
  QVector<LoadSeen> seen;
  QStringList order;  // "cache latents", "load T5", ... as they came
  connect(w.bridge(), &TrainerBridge::loadProgress, &w, [&](const LoadProgressView& p) {
    seen << LoadSeen{p.what,           p.done, p.total, w.runHeader(), bar->text(), w.statusBar()->currentMessage(),
                     w.preparingText()};
    order << "load " + p.what;
  });
  // The cache fills before and around T5's load (T5 is read for the first caption it encodes).
  QVector<LoadSeen> cached;
  connect(w.bridge(), &TrainerBridge::cacheProgress, &w, [&](const CacheProgressView& p) {
    cached << LoadSeen{p.stage,          p.done, p.total, w.runHeader(), bar->text(), w.statusBar()->currentMessage(),
                       w.preparingText()};
    order << "cache " + p.stage;
  });
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
  child<QPushButton>(&w, "startButton")->click();
  QVERIFY2(w.runHeader().startsWith("Starting"), qPrintable(w.runHeader()));
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 120000);

  // Every block of T5, then every block of the transformer, in order, each shown as it came.
  QVector<LoadSeen> t5, transformer;
  for (const LoadSeen& s : seen) (s.what == "T5" ? t5 : transformer) << s;
  QCOMPARE(int(t5.size()), t5Units);
  QCOMPARE(int(transformer.size()), transformerUnits);
  QCOMPARE(seen.front().what, QString("T5"));
  QCOMPARE(seen.back().what, QString("transformer"));
  for (int i = 0; i < int(seen.size()); ++i) {
    const LoadSeen& s = seen[i];
    const bool isT5 = s.what == "T5";
    QCOMPARE(s.done, qint64((isT5 ? i : i - t5Units) + 1));
    QCOMPARE(s.total, qint64(isT5 ? t5Units : transformerUnits));
    const QString line =
        QString("Loading %1: %2 of %3").arg(isT5 ? "the T5 text encoder" : "the transformer").arg(s.done).arg(s.total);
    QCOMPARE(s.line, line);
    QVERIFY2(s.header.startsWith(line), qPrintable(s.header));
    QCOMPARE(s.status, line);  // on the status line too, seen from every tab
    QCOMPARE(s.bar, QString("loading %1: %2 / %3").arg(s.what).arg(s.done).arg(s.total));
  }
  // The latents, then the captions (T5 loads for them), each to its end, before the transformer.
  const int images = 3;
  QVERIFY(!cached.isEmpty());
  for (const char* stage : {"latents", "text"}) {
    const auto last = std::find_if(cached.rbegin(), cached.rend(), [&](const LoadSeen& s) { return s.what == stage; });
    QVERIFY2(last != cached.rend(), stage);
    // One latent per image (one bucket each); the texts are the captions and the empty caption-dropout one.
    const bool latents = QString(stage) == "latents";
    if (latents)
      QCOMPARE(last->total, qint64(images));
    else
      QVERIFY(last->total > images);
    QCOMPARE(last->done, last->total);
    const QString line =
        QString("Caching %1: %2 of %2").arg(latents ? "the image latents" : "the caption embeddings").arg(last->total);
    QCOMPARE(last->line, line);
    QVERIFY2(last->header.startsWith(line), qPrintable(last->header));
    QCOMPARE(last->status, line);
    QCOMPARE(last->bar, QString("caching %1: %2 / %2").arg(stage).arg(last->total));
  }
  const int firstT5 = int(order.indexOf("load T5")), lastT5 = int(order.lastIndexOf("load T5"));
  QVERIFY2(order.indexOf("cache text") < firstT5 && order.lastIndexOf("cache text") > lastT5,
           qPrintable(order.join(", ")));
  QVERIFY2(order.lastIndexOf(QRegularExpression("cache .*")) < int(order.indexOf("load transformer")),
           qPrintable(order.join(", ")));
  // Training started: the load is gone from the header, the status line and the bar.
  QVERIFY(w.preparingText().isEmpty());
  QVERIFY2(!w.runHeader().contains("Loading"), qPrintable(w.runHeader()));
  QVERIFY2(!w.statusBar()->currentMessage().contains("Loading"), qPrintable(w.statusBar()->currentMessage()));
  QVERIFY2(bar->text().startsWith("step "), qPrintable(bar->text()));
  QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
  QTRY_VERIFY(!w.bridge()->isActive());
}

STRATA_GUI_TEST_MAIN(RunViewTest)
#include "RunViewTest.moc"
