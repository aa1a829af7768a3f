// The app trains in a strata-train child process (docs/app.md "The training
// process"), on the real window, offscreen, with the demo on the CPU: a run's
// steps, samples and finish arrive from the child; a child killed mid-run
// (SIGKILL) is a failed run that names the signal and quotes the child's stderr,
// and the window resumes it and trains again afterwards; a child that refuses its
// input is a failure quoting its stderr; Stop keeps a checkpoint and the child
// ends; a strata-train that cannot be found is a clear error.
#include <QCoreApplication>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <QRegularExpression>
#include <QTabWidget>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <cerrno>
#include <cmath>
#include <csignal>

#include "DemoRunSupport.h"
#include "GuiTestSupport.h"
#include "ui/app/MainWindow.h"
#include "ui/backend/TrainerBridge.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"

using namespace strata::ui;
using namespace strata::ui::test;

class TrainerChildTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase();
  void trainsInAChildProcess();
  void aKilledChildFailsTheRunAndTheWindowTrainsAgain();
  void aChildThatRefusesItsInputIsAFailureQuotingItsStderr();
  void stopKeepsACheckpointAndEndsTheChild();
  void aMissingTrainerIsAClearError();
  void trainsAsTwoCpuReplicasWithAMapEach();
  void theFirstReplicaFailureIsTheRunsAndLaterOnesAreWarnings();

 private:
  bool openDemo(MainWindow& w, const QString& runs, int sampleEvery);
  // Starts the demo for `steps` steps and waits for its first trained step (QTest fails when it does not come).
  void startAndWaitForAStep(MainWindow& w, qint64 steps);
  QTemporaryDir tmp_;
  QString settings_;
};

void TrainerChildTest::initTestCase() {
  QVERIFY(tmp_.isValid());
  settings_ = tmp_.filePath("child-test.ini");
  QVERIFY(QDir(tmp_.path()).mkpath("cwd"));
  QVERIFY(QDir::setCurrent(tmp_.filePath("cwd")));
  QString error;
  QVERIFY2(!TrainerBridge::findTrainer(&error).isEmpty(), qPrintable(error));
}

bool TrainerChildTest::openDemo(MainWindow& w, const QString& runs, int sampleEvery) {
  return openDemoForRun(w, tmp_.filePath("demo.yaml"), runs, sampleEvery);
}

void TrainerChildTest::startAndWaitForAStep(MainWindow& w, qint64 steps) {
  w.setStepLimit(steps);
  QSignalSpy progressed(w.bridge(), &TrainerBridge::progress);
  child<QPushButton>(&w, "startButton")->click();
  QVERIFY(w.bridge()->isActive());
  QTRY_VERIFY_WITH_TIMEOUT(!progressed.isEmpty() && progressed.back().at(0).toLongLong() >= 1, 90000);
}

void TrainerChildTest::trainsInAChildProcess() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-child", 3));
  w.setStepLimit(6);
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  QSignalSpy samples(w.bridge(), &TrainerBridge::sampleReady);
  QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
  QSignalSpy failed(w.bridge(), &TrainerBridge::failed);
  child<QPushButton>(&w, "startButton")->click();
  QVERIFY(w.bridge()->isActive());
  // The run is another process: the strata-train the bridge found.
  QTRY_VERIFY(w.bridge()->childProcessId() > 0);
  QVERIFY(w.bridge()->childProcessId() != QCoreApplication::applicationPid());
  QCOMPARE(QFileInfo(w.bridge()->trainerProgram()).fileName(), QString("strata-train"));
  QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 180000);
  QTRY_VERIFY(!w.bridge()->isActive());
  QCOMPARE(w.bridge()->childProcessId(), 0);
  QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().at(0).toString()));
  QCOMPARE(started.count(), 1);
  QCOMPARE(started.front().at(2).toLongLong(), 6);  // total steps, decoded from the child's line
  QCOMPARE(finished.front().at(0).toLongLong(), 6);
  // Steps 0, 3 and 6 sample; each is a file the child wrote.
  QVERIFY2(samples.count() >= 2, qPrintable(QString::number(samples.count())));
  for (const auto& s : samples) QVERIFY(QFileInfo::exists(s.at(0).value<SampleInfo>().path));
  // The views got every step through the same signals as before.
  QTRY_COMPARE_WITH_TIMEOUT(w.lossPlot()->lastStep(), 6, 10000);
  QVERIFY(w.lossPlot()->plottedPointCount() >= 6);
}

void TrainerChildTest::aKilledChildFailsTheRunAndTheWindowTrainsAgain() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-kill", 1000));
  QVERIFY(w.configEditor()->setValueText("save.save_every", "1"));  // a checkpoint to resume from
  QSignalSpy failed(w.bridge(), &TrainerBridge::failed);
  QSignalSpy saved(w.bridge(), &TrainerBridge::checkpointSaved);
  startAndWaitForAStep(w, 2000);
  if (QTest::currentTestFailed()) return;
  QTRY_VERIFY_WITH_TIMEOUT(!saved.isEmpty(), 60000);
  const qint64 pid = w.bridge()->childProcessId();
  QVERIFY(pid > 0);
  QCOMPARE(::kill(pid_t(pid), SIGKILL), 0);  // as a CUDA fault or the OOM killer would
  // Control lines written to the dead child before the app has noticed it is gone
  // meet a closed pipe: no SIGPIPE may take the window down with it.
  QTest::qSleep(300);
  w.bridge()->pause();
  w.bridge()->sampleNow();
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, 30000);
  QTRY_VERIFY(!w.bridge()->isActive());
  const QString message = failed.front().at(0).toString();
  QVERIFY2(message.contains("was ended by signal 9"), qPrintable(message));
  QVERIFY2(message.contains("the app is unaffected"), qPrintable(message));
  QVERIFY(failed.front().at(1).toLongLong() >= 1);      // the last step it reported
  QVERIFY(!failed.front().at(2).toString().isEmpty());  // and its last checkpoint
  QVERIFY2(w.runHeader().startsWith("The run failed"), qPrintable(w.runHeader()));
  auto* box = w.findChild<QMessageBox*>("errorDialog");
  QVERIFY(box);
  QVERIFY2(box->text().contains("signal 9"), qPrintable(box->text()));
  box->close();

  // The killed run resumes from its last checkpoint in a new child.
  auto* resume = child<QPushButton>(&w, "resumeRunButton");
  QTRY_VERIFY(resume->isEnabled());
  QSignalSpy started(w.bridge(), &TrainerBridge::started);
  resume->click();
  QTRY_VERIFY_WITH_TIMEOUT(started.count() == 1, 60000);
  QVERIFY(started.front().at(3).toBool());           // resumed
  QVERIFY(started.front().at(1).toLongLong() >= 1);  // from the step of a checkpoint
  child<QPushButton>(&w, "stopButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(!w.bridge()->isActive(), 60000);

  // And a new run trains to its end.
  QVERIFY(openDemo(w, "runs-after-kill", 1000));
  w.setStepLimit(2);
  QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
  QTRY_VERIFY(!w.bridge()->isActive());
  QCOMPARE(failed.count(), 1);
}

void TrainerChildTest::aChildThatRefusesItsInputIsAFailureQuotingItsStderr() {
  // `strata-train resume` of a folder that is no run: exit 2 with one stderr line, no event.
  QTemporaryDir notARun;
  QVERIFY(notARun.isValid());
  TrainerBridge bridge;
  QSignalSpy failed(&bridge, &TrainerBridge::failed);
  QString error;
  QVERIFY2(bridge.resume(notARun.path(), &error), qPrintable(error));
  QTRY_VERIFY_WITH_TIMEOUT(failed.count() == 1, 30000);
  QTRY_VERIFY(!bridge.isActive());
  const QString message = failed.front().at(0).toString();
  QVERIFY2(message.contains("exited with code 2"), qPrintable(message));
  QVERIFY2(message.contains("Its last messages:\nstrata-train resume: "), qPrintable(message));
  QVERIFY2(message.contains(notARun.path()), qPrintable(message));
}

void TrainerChildTest::stopKeepsACheckpointAndEndsTheChild() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-stop", 1000));
  QSignalSpy stopped(w.bridge(), &TrainerBridge::stopped);
  QSignalSpy failed(w.bridge(), &TrainerBridge::failed);
  startAndWaitForAStep(w, 2000);
  if (QTest::currentTestFailed()) return;
  const qint64 pid = w.bridge()->childProcessId();
  QVERIFY(pid > 0);
  child<QPushButton>(&w, "stopButton")->click();  // a stop line on the child's stdin
  QCOMPARE(w.bridge()->state(), TrainerBridge::State::Stopping);
  QTRY_VERIFY_WITH_TIMEOUT(stopped.count() == 1, 60000);
  const QString checkpoint = stopped.front().at(1).toString();
  QVERIFY(!checkpoint.isEmpty());
  QVERIFY2(QFileInfo(checkpoint).isDir(), qPrintable(checkpoint));
  QTRY_VERIFY_WITH_TIMEOUT(!w.bridge()->isActive(), 30000);
  QVERIFY(failed.isEmpty());  // exit code 130 after a stop is no failure
  errno = 0;
  QCOMPARE(::kill(pid_t(pid), 0), -1);  // the child is gone (and reaped)
  QCOMPARE(errno, ESRCH);
}

void TrainerChildTest::aMissingTrainerIsAClearError() {
  const QByteArray saved = qgetenv("STRATA_TRAIN_BIN");
  qputenv("STRATA_TRAIN_BIN", tmp_.filePath("no-such-strata-train").toLocal8Bit());
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-missing", 1000));
  w.setStepLimit(2);
  child<QPushButton>(&w, "startButton")->click();
  qputenv("STRATA_TRAIN_BIN", saved);
  QVERIFY(!w.bridge()->isActive());
  auto* box = w.findChild<QMessageBox*>("errorDialog");
  QVERIFY(box);
  const QString text = box->text() + "\n" + box->informativeText() + "\n" + box->detailedText();
  QVERIFY2(text.contains("STRATA_TRAIN_BIN names") && text.contains("no-such-strata-train"), qPrintable(text));
}

// Issue 35 point 8: the demo as 2 CPU replicas (model.replicas: 2) through the installed
// strata-train: one GPU map per replica, each labelled with its rank and device; the
// loss curve and the steps are rank 0's alone; the header's throughput counts both.
void TrainerChildTest::trainsAsTwoCpuReplicasWithAMapEach() {
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-replicas", 1000));
  ConfigEditor* e = w.configEditor();
  QVERIFY(e->setValueText("model.replicas", "2"));
  QVERIFY(e->setValueText("train.batch_size", "1"));
  QVERIFY(e->setValueText("train.gradient_accumulation_steps", "1"));
  w.setStepLimit(12);
  QSignalSpy finished(w.bridge(), &TrainerBridge::finished);
  QSignalSpy failed(w.bridge(), &TrainerBridge::failed);
  QSignalSpy points(w.bridge(), &TrainerBridge::metricsReady);
  QSignalSpy replicaPlaced(w.bridge(), &TrainerBridge::replicaPlacementChanged);
  QSignalSpy throughput(w.bridge(), &TrainerBridge::throughputUpdated);
  QSignalSpy progressed(w.bridge(), &TrainerBridge::progress);
  QStringList headers;  // the header after each progress (the window's slot runs first)
  connect(w.bridge(), &TrainerBridge::progress, &w, [&] { headers << w.runHeader(); });
  child<QPushButton>(&w, "startButton")->click();
  QVERIFY(w.bridge()->isActive());
  QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 180000);
  QTRY_VERIFY(!w.bridge()->isActive());
  QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().at(0).toString()));
  QCOMPARE(finished.front().at(0).toLongLong(), 12);
  // Rank 1 placed its replica: a second map, both labelled.
  QVERIFY(!replicaPlaced.isEmpty());
  QCOMPARE(replicaPlaced.front().at(0).toInt(), 1);
  QCOMPARE(w.replicaMaps().size(), 2);
  QCOMPARE(w.liveMapTabs()->count(), 2);
  QCOMPARE(w.liveMapTabs()->tabText(0), QString("Replica 0: cpu"));
  QCOMPARE(w.liveMapTabs()->tabText(1), QString("Replica 1: cpu"));
  QVERIFY(!w.replicaMaps()[1]->placement().devices.isEmpty());
  QCOMPARE(w.replicaMaps()[1]->placement().devices.front().label, QString("cpu"));
  // The curve is rank 0's: one point per step, not one per rank.
  int n = 0;
  for (const auto& batch : points) n += batch.at(0).value<QVector<MetricPoint>>().size();
  QCOMPARE(n, 12);
  // Throughput over both replicas: rank 0's images per second count the world (2 ranks x batch 1).
  QVERIFY(!throughput.isEmpty() && !progressed.isEmpty());
  QCOMPARE(throughput.back().at(1).toInt(), 2);
  const double imagesPerStep = throughput.back().at(0).toDouble() * progressed.back().at(2).toDouble() / 1000.0;
  QVERIFY2(std::abs(imagesPerStep - 2.0) < 1e-6, qPrintable(QString::number(imagesPerStep)));
  bool shown = false;
  for (const QString& h : headers) shown = shown || h.contains(QRegularExpression("[0-9.]+ images/s over 2 replicas"));
  QVERIFY2(shown, qPrintable(headers.join('\n')));
  // Another start goes back to one map.
  QVERIFY(e->setValueText("model.replicas", "1"));
  QVERIFY(e->setValueText("job.training_folder", tmp_.filePath("runs-one")));
  w.setStepLimit(2);
  QSignalSpy finishedOne(w.bridge(), &TrainerBridge::finished);
  child<QPushButton>(&w, "startButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(finishedOne.count() == 1, 120000);
  QCOMPARE(w.replicaMaps().size(), 1);
  QCOMPARE(w.liveMapTabs()->count(), 1);
}

// A scripted strata-train's stream of a data-parallel run that fails: the first failure
// (the rank that died, as the launcher sends it first) is the run's, the next (rank 0's
// broken collective) a warning; a rank past what the app shows is a warning too.
void TrainerChildTest::theFirstReplicaFailureIsTheRunsAndLaterOnesAreWarnings() {
  const QString script = tmp_.filePath("scripted-strata-train");
  {
    QFile f(script);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"sh(#!/bin/sh
cat <<'EOF'
{"v":1,"type":"started","rank":0,"runDir":"scripted","jobName":"x","startStep":0,"totalSteps":5}
{"v":1,"type":"placement","rank":5000,"reason":"r","blocks":[]}
{"v":1,"type":"failed","rank":1,"message":"rank 1 was killed by signal 9 (Killed)","step":3}
{"v":1,"type":"failed","rank":0,"message":"the collective broke","step":3}
EOF
exit 1
)sh");
    f.setPermissions(f.permissions() | QFileDevice::ExeOwner);
  }
  const QByteArray saved = qgetenv("STRATA_TRAIN_BIN");
  qputenv("STRATA_TRAIN_BIN", script.toLocal8Bit());
  MainWindow w(settings_);
  w.show();
  QVERIFY(openDemo(w, "runs-scripted", 1000));
  QSignalSpy failed(w.bridge(), &TrainerBridge::failed);
  QSignalSpy warned(w.bridge(), &TrainerBridge::warning);
  QSignalSpy replicaPlaced(w.bridge(), &TrainerBridge::replicaPlacementChanged);
  child<QPushButton>(&w, "startButton")->click();
  qputenv("STRATA_TRAIN_BIN", saved);
  QTRY_VERIFY_WITH_TIMEOUT(!w.bridge()->isActive(), 30000);
  QCOMPARE(failed.count(), 1);
  QCOMPARE(failed.front().at(0).toString(), QString("rank 1 was killed by signal 9 (Killed)"));
  QStringList warnings;
  for (const auto& wv : warned) warnings << wv.at(0).toString();
  QVERIFY2(warnings.contains("the collective broke"), qPrintable(warnings.join('\n')));
  QVERIFY2(warnings.filter("rank 5000 is past the 1024 replicas the app shows").size() == 1,
           qPrintable(warnings.join('\n')));
  QVERIFY(replicaPlaced.isEmpty());
  QCOMPARE(w.replicaMaps().size(), 1);
}

STRATA_GUI_TEST_MAIN(TrainerChildTest)
#include "TrainerChildTest.moc"
