// The app end to end, driving the real widgets by objectName, offscreen: load
// the demo config, see a config error block Start, train the demo while the GUI
// thread stays responsive, see loss points and a sample arrive, stop, export.
#include <QAbstractButton>
#include <QCheckBox>
#include <QDialog>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include "GuiTestSupport.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"
#include "ui/app/MainWindow.h"
#include "ui/widgets/SampleBrowser.h"
#include "ui/backend/TrainerBridge.h"

using namespace strata::ui;

namespace {

QString demoConfig() {
  const QByteArray root = qgetenv("STRATA_SOURCE_DIR");
  return QDir(root.isEmpty() ? QString(STRATA_TEST_SOURCE_DIR) : QString::fromLocal8Bit(root))
      .filePath("configs/demo.yaml");
}

template <class T>
T* child(QWidget* w, const QString& name) {
  T* c = w->findChild<T*>(name);
  if (!c) qWarning("no child %s", qPrintable(name));
  return c;
}

bool hasErrorAbout(const ConfigEditor* e, const QString& what) {
  for (const ProblemView& p : e->problems())
    if (p.error && (p.key.contains(what) || p.message.contains(what))) return true;
  return false;
}

}  // namespace

class MainWindowTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void loadsTheDemoConfig();
  void lowVramWithSplitIsAnErrorThatBlocksStart();
  void yamlTabAndFormStayInSync();
  void coreErrorsBecomeADialog();
  void trainsStopsAndExportsWhileResponsive();
  void windowStateIsRemembered();

 private:
  QTemporaryDir tmp_;
  QString settings_;
};

void MainWindowTest::initTestCase() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("strata-test.ini");
  QVERIFY2(QFileInfo::exists(demoConfig()), qPrintable(demoConfig()));
}

void MainWindowTest::loadsTheDemoConfig() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  ConfigEditor* e = w.configEditor();
  QVERIFY2(!e->hasErrors(), qPrintable(e->problems().isEmpty() ? QString() : e->problems().front().message));
  QVERIFY(child<QPushButton>(&w, "startButton")->isEnabled());
  QVERIFY(e->yamlText().contains("train:"));
  // The planned placement of the demo is drawn before any run.
  QVERIFY(w.plannedMap()->placement().planned);
  QVERIFY2(!w.plannedMap()->placement().devices.isEmpty(), qPrintable(w.plannedMap()->placement().error));
  QVERIFY(w.recentConfigs().contains(QFileInfo(demoConfig()).absoluteFilePath()));
  // Every key has a form field with its doc string as tooltip.
  QWidget* steps = e->fieldFor("train.steps");
  QVERIFY(steps);
  QVERIFY(!steps->toolTip().isEmpty());
}

void MainWindowTest::lowVramWithSplitIsAnErrorThatBlocksStart() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  ConfigEditor* e = w.configEditor();
  auto* start = child<QPushButton>(&w, "startButton");
  QVERIFY(start->isEnabled());
  auto* split = child<QCheckBox>(&w, "cfg_model.split_model_over_gpus");
  auto* lowVram = child<QCheckBox>(&w, "cfg_model.low_vram");
  QVERIFY(split && lowVram);
  if (!split->isChecked()) split->click();
  lowVram->click();
  QVERIFY(lowVram->isChecked());
  QTRY_VERIFY(hasErrorAbout(e, "low_vram"));
  QVERIFY(!start->isEnabled());
  // The offending field is marked, and the YAML tab says so too.
  QCOMPARE(lowVram->property("problem").toString(), QString("error"));
  QVERIFY(e->yamlText().contains("low_vram: true"));
  QVERIFY(!child<QLabel>(&w, "problemSummary")->text().isEmpty());
  // Taking it back clears the error.
  lowVram->click();
  QTRY_VERIFY(!hasErrorAbout(e, "low_vram"));
  QCOMPARE(lowVram->property("problem").toString(), QString());
  if (!e->hasErrors()) QVERIFY(start->isEnabled());
}

void MainWindowTest::yamlTabAndFormStayInSync() {
  MainWindow w(settings_);
  QVERIFY(w.openConfig(demoConfig()));
  ConfigEditor* e = w.configEditor();
  // Form -> YAML.
  QVERIFY(e->setValueText("train.steps", "123"));
  QVERIFY(e->yamlText().contains("steps: 123"));
  // YAML -> form.
  QString text = e->yamlText();
  text.replace("steps: 123", "steps: 77");
  e->setYamlText(text);
  QCOMPARE(qobject_cast<QSpinBox*>(e->fieldFor("train.steps"))->value(), 77);
  // A YAML syntax error is a problem with its line, and Start is disabled.
  e->setYamlText(text + "\n  bad: [unclosed\n");
  QVERIFY(e->hasErrors());
  bool withLine = false;
  for (const ProblemView& p : e->problems()) withLine |= p.error && p.line > 0;
  QVERIFY(withLine);
  QVERIFY(!child<QPushButton>(&w, "startButton")->isEnabled());
}

void MainWindowTest::coreErrorsBecomeADialog() {
  MainWindow w(settings_);
  w.show();
  QTemporaryDir notARun;
  w.resumeRunFolder(notARun.path());  // the trainer refuses it on its thread
  QTRY_VERIFY_WITH_TIMEOUT(w.findChild<QMessageBox*>("errorDialog") != nullptr, 30000);
  QTRY_VERIFY(!w.bridge()->isActive());
  w.findChild<QMessageBox*>("errorDialog")->close();
}

void MainWindowTest::trainsStopsAndExportsWhileResponsive() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(w.openConfig(demoConfig()));
  ConfigEditor* e = w.configEditor();
  const QString runs = tmp_.filePath("runs");
  QVERIFY(e->setValueText("job.training_folder", runs));
  QVERIFY(e->setValueText("sample.sample_every", "4"));
  QVERIFY(e->setValueText("save.save_every", "0"));
  w.setStepLimit(2000);  // far more than the test waits for: it stops the run itself
  QVERIFY(!e->hasErrors());

  // A GUI-thread timer that must keep ticking while the demo trains.
  QElapsedTimer clock;
  qint64 last = 0, worstGapMs = 0, ticks = 0;
  QTimer heartbeat;
  heartbeat.setInterval(20);
  connect(&heartbeat, &QTimer::timeout, [&] {
    const qint64 now = clock.elapsed();
    worstGapMs = std::max(worstGapMs, now - last);
    last = now;
    ++ticks;
  });

  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  QSignalSpy samples(w.bridge(), &TrainerBridge::sampleReady);
  child<QPushButton>(&w, "startButton")->click();
  QVERIFY(w.bridge()->isActive());
  clock.start();
  heartbeat.start();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 60000);
  QTRY_VERIFY_WITH_TIMEOUT(w.lossPlot()->plottedPointCount() >= 3, 90000);
  QTRY_VERIFY_WITH_TIMEOUT(samples.count() >= 1, 90000);
  const QString sampleFile = w.sampleBrowser()->samples().front().path;
  QVERIFY2(QFileInfo::exists(sampleFile), qPrintable(sampleFile));
  QVERIFY(child<QPushButton>(&w, "stopButton")->isEnabled());
  QVERIFY(!child<QPushButton>(&w, "startButton")->isEnabled());
  // The live map shows where the blocks are.
  QTRY_VERIFY_WITH_TIMEOUT(!w.liveMap()->placement().devices.isEmpty(), 10000);
  QVERIFY(!w.liveMap()->placement().planned);

  // Pause and resume go through the trainer's atomics.
  child<QPushButton>(&w, "pauseButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(w.bridge()->state() == TrainerBridge::State::Paused, 30000);
  child<QPushButton>(&w, "pauseButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(w.bridge()->state() == TrainerBridge::State::Running, 30000);

  QSignalSpy stopped(w.bridge(), &TrainerBridge::stopped);
  child<QPushButton>(&w, "stopButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(!w.bridge()->isActive(), 60000);
  heartbeat.stop();
  QCOMPARE(stopped.count(), 1);
  const qint64 stepsSeen = w.lossPlot()->lastStep();
  QVERIFY(stepsSeen >= 3);
  // Responsive: the heartbeat never stalled while training ran beside it.
  QVERIFY2(worstGapMs < 1000, qPrintable(QString("worst GUI gap %1 ms").arg(worstGapMs)));
  QVERIFY(ticks > clock.elapsed() / 20 / 4);

  // Export in two formats through the dialog.
  auto* exportButton = child<QPushButton>(&w, "exportButton");
  QVERIFY(exportButton->isEnabled());
  exportButton->click();
  auto* dialog = w.findChild<QDialog*>("exportDialog");
  QVERIFY(dialog);
  child<QCheckBox>(dialog, "exportFormat_diffusers")->setChecked(true);
  child<QCheckBox>(dialog, "exportFormat_kohya")->setChecked(true);
  child<QCheckBox>(dialog, "exportFormat_comfy")->setChecked(false);
  const QString outDir = tmp_.filePath("exported");
  child<QLineEdit>(dialog, "exportDir")->setText(outDir);
  QSignalSpy exported(w.bridge(), &TrainerBridge::exportFinished);
  child<QPushButton>(dialog, "exportOk")->click();
  QTRY_VERIFY_WITH_TIMEOUT(exported.count() == 1, 60000);
  QVERIFY2(exported.front().at(0).toBool(), qPrintable(exported.front().at(1).toString()));
  const QStringList files = exported.front().at(2).toStringList();
  QCOMPARE(files.size(), 2);
  for (const QString& f : files) {
    QVERIFY2(QFileInfo(f).size() > 0, qPrintable(f));
    QVERIFY(f.startsWith(outDir));
  }
  QVERIFY(w.recentRunFolders().size() >= 1);
}

void MainWindowTest::windowStateIsRemembered() {
  const QString ini = tmp_.filePath("state.ini");
  {
    MainWindow w(ini);
    w.show();
    w.resize(1111, 777);
    w.findChild<QLineEdit*>("deviceSpec")->setText("2x24GB");
    w.tabs()->setCurrentIndex(2);
    w.close();
  }
  MainWindow again(ini);
  again.show();
  QCOMPARE(again.size(), QSize(1111, 777));
  QCOMPARE(again.tabs()->currentIndex(), 2);
  QCOMPARE(again.findChild<QLineEdit*>("deviceSpec")->text(), QString("2x24GB"));
}

STRATA_GUI_TEST_MAIN(MainWindowTest)
#include "MainWindowTest.moc"
