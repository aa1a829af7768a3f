#include "ScriptedRun.h"

#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCoreApplication>
#include <QDialog>
#include <QTimer>
#include <cstdio>

#include "ui/setup/ConfigEditor.h"
#include "ui/app/MainWindow.h"
#include "ui/backend/TrainerBridge.h"

namespace strata::app {

namespace {

void say(const QString& line) {
  std::fprintf(stdout, "strata: %s\n", qPrintable(line));
  std::fflush(stdout);
}

}  // namespace

ScriptedRun::ScriptedRun(ui::MainWindow* window, bool configOpened, QStringList exportFormats, bool quitWhenDone)
    : QObject(window),
      window_(window),
      configOpened_(configOpened),
      exportFormats_(std::move(exportFormats)),
      quitWhenDone_(quitWhenDone) {
  ui::TrainerBridge* bridge = window_->bridge();
  connect(bridge, &ui::TrainerBridge::started, this,
          [bridge](const QString& runDir, qint64 startStep, qint64 total, bool) {
            say(QString("started: run folder %1, steps %2 to %3").arg(runDir).arg(startStep).arg(total));
            say("trained by " + bridge->trainerProgram());  // the child process's program
          });
  connect(bridge, &ui::TrainerBridge::setupDescribed, this, [](const QString& setup) { say("setup: " + setup); });
  connect(bridge, &ui::TrainerBridge::checkpointSaved, this,
          [](const QString& path, qint64 step) { say(QString("checkpoint at step %1: %2").arg(step).arg(path)); });
  connect(bridge, &ui::TrainerBridge::loraExported, this,
          [](const QString& path, const QString& format) { say(QString("LoRA (%1): %2").arg(format, path)); });
  connect(bridge, &ui::TrainerBridge::finished, this, [this](qint64 step, double loss, const QStringList&) {
    runEnded(QString("finished at step %1, loss %2").arg(step).arg(loss, 0, 'g', 4), true);
  });
  connect(bridge, &ui::TrainerBridge::stopped, this, [this](qint64 step, const QString&) {
    runEnded(QString("stopped at step %1 before the end").arg(step), false);
  });
  connect(bridge, &ui::TrainerBridge::failed, this, [this](const QString& message, qint64 step, const QString&) {
    runEnded(QString("failed at step %1: %2").arg(step).arg(message), false);
  });
  connect(bridge, &ui::TrainerBridge::stateChanged, this, [this](ui::TrainerBridge::State state) {
    if (state == ui::TrainerBridge::State::Idle && exportWhenIdle_)
      QTimer::singleShot(0, this, [this] { exportThroughDialog(); });
  });
  connect(bridge, &ui::TrainerBridge::exportFinished, this,
          [this](bool ok, const QString& message, const QStringList& files) {
            if (!ok) return finish(kExitFailed, "export failed: " + message);
            finish(kExitDone, "exported: " + files.join(", "));
          });
}

void ScriptedRun::begin() {
  if (!configOpened_) return finish(kExitCannotStart, "cannot start: the config did not open (the reason is above)");
  auto* start = window_->findChild<QAbstractButton*>("startButton");
  if (!start) return finish(kExitCannotStart, "cannot start: the window has no Start button");
  if (!start->isEnabled()) {
    QString why = start->toolTip();
    for (const ui::ProblemView& p : window_->configEditor()->problems())
      if (p.error) why += QString("\n  %1:%2: %3").arg(p.key).arg(p.line).arg(p.message);
    return finish(kExitCannotStart, "cannot start: " + why);
  }
  say("clicking Start");
  start->click();
  // Start refused (an error dialog, the bridge stays idle): nothing will follow.
  if (!window_->bridge()->isActive()) finish(kExitCannotStart, "cannot start: the run did not begin (see above)");
}

void ScriptedRun::runEnded(const QString& what, bool ok) {
  say(what);
  if (!ok) return finish(kExitFailed, "no export: the run did not finish");
  if (exportFormats_.isEmpty()) return finish(kExitDone, "done");
  // The bridge goes idle (and Export becomes available) after its last signal.
  exportWhenIdle_ = true;
  if (!window_->bridge()->isActive()) exportThroughDialog();
}

void ScriptedRun::exportThroughDialog() {
  if (!exportWhenIdle_) return;
  exportWhenIdle_ = false;
  auto* action = window_->findChild<QAction*>("exportAction");
  if (!action || !action->isEnabled()) return finish(kExitFailed, "export: File > Export LoRA is not available");
  action->trigger();
  auto* dialog = window_->findChild<QDialog*>("exportDialog");
  if (!dialog || !dialog->isVisible()) return finish(kExitFailed, "export: the Export LoRA dialog did not open");
  QStringList offered;
  for (QCheckBox* box : dialog->findChildren<QCheckBox*>()) {
    if (!box->objectName().startsWith("exportFormat_")) continue;
    const QString name = box->objectName().mid(QString("exportFormat_").size());
    offered << name;
    box->setChecked(exportFormats_.contains(name));
  }
  for (const QString& f : exportFormats_)
    if (!offered.contains(f))
      return finish(kExitFailed,
                    QString("export: this run's family does not write '%1' (it offers %2)").arg(f, offered.join(", ")));
  auto* ok = dialog->findChild<QAbstractButton*>("exportOk");
  if (!ok) return finish(kExitFailed, "export: the dialog has no Export button");
  say("exporting " + exportFormats_.join(", ") + " through File > Export LoRA");
  // The trainer wrote this step's files already: the window asks Replace / Keep
  // both / Cancel in a modal box (exec()); answer "Keep both" as a user would.
  auto* answer = new QTimer(this);
  answer->setInterval(20);
  connect(answer, &QTimer::timeout, this, [answer] {
    QWidget* box = QApplication::activeModalWidget();
    if (!box || box->objectName() != "exportExistsDialog") return;
    if (auto* keep = box->findChild<QAbstractButton*>("exportKeepBoth")) {
      say("the export's files are there already: Keep both");
      answer->stop();
      keep->click();
    }
  });
  answer->start();
  ok->click();
  answer->stop();
  answer->deleteLater();
  // Still open: the dialog refused (its message says why).
  if (dialog->isVisible()) return finish(kExitFailed, "export: the dialog refused the choice");
}

void ScriptedRun::finish(int exitCode, const QString& line) {
  if (done_) return;
  done_ = true;
  say(line);
  if (quitWhenDone_) QCoreApplication::exit(exitCode);
}

}  // namespace strata::app
