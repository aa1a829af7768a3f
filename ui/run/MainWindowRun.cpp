// The main window's Run page: its tab, the trainer bridge's signals, the run
// header and progress, run control, exports and the run queue.
#include "ui/app/MainWindow.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDialog>
#include <QDesktopServices>
#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFrame>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QRegularExpression>
#include <QScreen>
#include <QPushButton>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QSystemTrayIcon>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/app/MainWindowParts.h"
#include "ui/backend/ConfigDocument.h"
#include "ui/backend/PlanBackend.h"
#include "ui/backend/RunQueue.h"
#include "ui/backend/TrainerRunner.h"
#include "ui/dialogs/ExportDialog.h"
#include "ui/dialogs/NewConfigDialog.h"
#include "ui/setup/ConfigEditor.h"
#include "ui/setup/DatasetView.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/GpuUsagePanel.h"
#include "ui/widgets/LossPlot.h"
#include "ui/widgets/RunQueuePanel.h"
#include "ui/widgets/SampleBrowser.h"
#include "ui/widgets/Theme.h"

namespace strata::ui {

namespace {
QString stateText(TrainerBridge::State s) {
  switch (s) {
    case TrainerBridge::State::Idle:
      return QObject::tr("idle");
    case TrainerBridge::State::Running:
      return QObject::tr("training");
    case TrainerBridge::State::Paused:
      return QObject::tr("paused");
    case TrainerBridge::State::Stopping:
      return QObject::tr("stopping");
    case TrainerBridge::State::Exporting:
      return QObject::tr("exporting");
  }
  return QString();
}

// Over a minute the time left is shown in steps of 5 s, so a smoothed estimate does not flicker.
QString formatEta(double seconds) {
  if (seconds <= 0) return QString();
  int s = int(seconds + 0.5);
  if (s >= 60) s = (s + 2) / 5 * 5;
  if (s >= 3600) return QString("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
  if (s >= 60) return QString("%1 min %2 s").arg(s / 60).arg(s % 60);
  return QString("%1 s").arg(s);
}
QString runFile(const QString& runDir, std::string runner::RunFolderFiles::*member) {
  return QString::fromStdString(runner::runFolderFiles(runDir.toStdString()).*member);
}

// Weight of the newest progress tick in the time-left estimate (ticks come every 150 ms).
constexpr double kEtaSmoothing = 0.1;

// The header from Start until the first load or cache figure.
QString startingHeader() {
  return QObject::tr("Starting: checking the config and the devices, then loading the model.");
}

}  // namespace

void MainWindow::buildRunTab() {
  auto* page = new QWidget(this);
  page->setObjectName("runPage");
  auto* layout = new QVBoxLayout(page);

  auto* controls = new QHBoxLayout;
  auto makeButton = [&](const QString& name, QAction* action) {
    auto* b = new QPushButton(action->icon(), action->text().remove('&'), page);
    b->setObjectName(name);
    connect(b, &QPushButton::clicked, action, &QAction::trigger);
    controls->addWidget(b);
    return b;
  };
  pauseButton_ = makeButton("pauseButton", pauseAction_);
  stopButton_ = makeButton("stopButton", stopAction_);
  sampleButton_ = makeButton("sampleNowButton", sampleAction_);
  saveButton_ = makeButton("saveNowButton", saveNowAction_);
  exportButton_ = makeButton("exportButton", exportAction_);
  // After a stop (or a failure with a checkpoint): go on from the run folder's last checkpoint.
  resumeButton_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaSeekForward), tr("Resume run"), page);
  resumeButton_->setObjectName("resumeRunButton");
  connect(resumeButton_, &QPushButton::clicked, this, [this] {
    if (!lastRunDir_.isEmpty()) resumeRunFolder(lastRunDir_);
  });
  controls->insertWidget(2, resumeButton_);
  controls->addStretch(1);
  layout->addLayout(controls);
  // The bar on a line of its own: the buttons and the bar side by side did not fit a 1024 px screen.
  progress_ = new QProgressBar(page);
  progress_->setObjectName("runProgress");
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat(tr("step %v / %m"));
  layout->addWidget(progress_);
  runStatus_ = new QLabel(tr("No run yet: set up a config and press Start."), page);
  runStatus_->setObjectName("runStatus");
  runStatus_->setWordWrap(true);
  layout->addWidget(runStatus_);
  // How the base is held and the step runs (dtype, quantization, attention, graph,
  // offloads): said once per run, as strata-train's run header does.
  runSetup_ = new QLabel(page);
  runSetup_->setObjectName("runSetup");
  runSetup_->setWordWrap(true);
  runSetup_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  runSetup_->hide();
  layout->addWidget(runSetup_);

  lossPlot_ = new LossPlot(page);
  gpuUsage_ = new GpuUsagePanel(page);
  runTopSplit_ = new QSplitter(Qt::Horizontal, page);
  runTopSplit_->setObjectName("runTopSplitter");
  runTopSplit_->addWidget(lossPlot_);
  runTopSplit_->addWidget(gpuUsage_);
  runTopSplit_->setStretchFactor(0, 3);
  runTopSplit_->setStretchFactor(1, 2);
  runTopSplit_->setSizes({860, 540});
  queuePanel_ = new RunQueuePanel(queue_, page);
  liveMap_ = new GpuMapView(page);
  liveMap_->setObjectName("liveMap");
  // One map per replica of a data-parallel run, a tab each; the tabs show only then.
  liveMapTabs_ = new QTabWidget(page);
  liveMapTabs_->setObjectName("liveMapTabs");
  liveMapTabs_->setDocumentMode(true);
  liveMapTabs_->setTabBarAutoHide(true);
  liveMapTabs_->addTab(liveMap_, tr("GPU map"));
  replicaMaps_ = {liveMap_};
  latestStrip_ = new SampleStrip(page, 128);
  latestStrip_->setObjectName("runLatestSamples");
  runBottomSplit_ = new QSplitter(Qt::Horizontal, page);
  runBottomSplit_->setObjectName("runBottomSplitter");
  runBottomSplit_->addWidget(liveMapTabs_);
  runBottomSplit_->addWidget(latestStrip_);
  runBottomSplit_->addWidget(queuePanel_);
  runBottomSplit_->setStretchFactor(0, 2);
  runBottomSplit_->setStretchFactor(1, 2);
  runBottomSplit_->setStretchFactor(2, 2);
  runBottomSplit_->setSizes({480, 480, 440});
  runSplit_ = new QSplitter(Qt::Vertical, page);
  runSplit_->setObjectName("runSplitter");
  runSplit_->addWidget(runTopSplit_);
  runSplit_->addWidget(runBottomSplit_);
  runSplit_->setStretchFactor(0, 1);
  runSplit_->setStretchFactor(1, 1);
  runSplit_->setSizes({460, 400});
  layout->addWidget(runSplit_, 1);
  tabs_->addTab(page, tr("Run"));
}

void MainWindow::connectBridge() {
  connect(bridge_, &TrainerBridge::stateChanged, this, [this](TrainerBridge::State state) {
    updateRunControls();
    if (state == TrainerBridge::State::Stopping) updateRunHeader();
    // Closing was asked for during the run: the checkpoint is written, now close.
    if (state == TrainerBridge::State::Idle && closeAfterStop_) close();
    // The trainer is free: the queue's next config, after the signals of the last one.
    if (state == TrainerBridge::State::Idle && queueRunning_ && !closeAfterStop_)
      QTimer::singleShot(0, this, &MainWindow::startNextQueued);
  });
  connect(bridge_, &TrainerBridge::loadProgress, this, &MainWindow::showLoadProgress);
  connect(bridge_, &TrainerBridge::cacheProgress, this, &MainWindow::showCacheProgress);
  connect(bridge_, &TrainerBridge::setupDescribed, this, [this](const QString& setup) {
    runSetup_->setText(tr("How it runs: %1").arg(setup));
    runSetup_->setVisible(!setup.isEmpty());
  });
  connect(bridge_, &TrainerBridge::started, this,
          [this](const QString& runDir, qint64 startStep, qint64 totalSteps, bool resumed) {
            endPreparing();
            lastRunDir_ = absolute(runDir);  // a relative training_folder is relative to where the app started
            addRecent(kRecentRuns, lastRunDir_);
            if (!queuedRunId_.isEmpty())
              queue_->setState(queuedRunId_, RunQueue::State::Running, tr("started"), lastRunDir_);
            if (resumed)
              lossPlot_->loadMetricsFile(runFile(lastRunDir_, &runner::RunFolderFiles::metrics));
            else
              lossPlot_->clear();
            samples_->setPrompts(editor_->document()->samplePrompts());
            samples_->setRunDir(lastRunDir_);
            latestStrip_->setSamples(samples_->latestSamples());
            step_ = startStep;
            totalSteps_ = totalSteps;
            stepTimeMs_ = etaSmoothed_ = 0;
            lastRunDone_ = false;
            queued_.clear();
            progress_->setRange(0, int(std::max<qint64>(1, totalSteps)));
            progress_->setValue(int(startStep));
            setRunHeader(tr("%1 run in %2 (step %3 of %4)")
                             .arg(resumed ? tr("Resumed") : tr("Started"), lastRunDir_)
                             .arg(startStep)
                             .arg(totalSteps));
            tabs_->setCurrentIndex(1);
          });
  connect(bridge_, &TrainerBridge::metricsReady, lossPlot_, &LossPlot::appendPoints);
  connect(bridge_, &TrainerBridge::progress, this,
          [this](qint64 step, qint64 total, double stepTimeMs, double etaSeconds) {
            progress_->setRange(0, int(std::max<qint64>(1, total)));
            progress_->setValue(int(step));
            step_ = step;
            totalSteps_ = total;
            stepTimeMs_ = stepTimeMs;
            // The trainer's estimate follows the last steps; smoothed here so it does not jump.
            etaSmoothed_ = etaSmoothed_ <= 0 || etaSeconds <= 0
                               ? etaSeconds
                               : (1 - kEtaSmoothing) * etaSmoothed_ + kEtaSmoothing * etaSeconds;
            // A request is served after the step that follows it.
            if (!queued_.isEmpty() && step > queuedAtStep_ + 1) queued_.clear();
            updateRunHeader();
          });
  connect(bridge_, &TrainerBridge::memoryUpdated, liveMap_, &GpuMapView::updateMemory);
  connect(bridge_, &TrainerBridge::placementChanged, this,
          [this](const PlacementView& placement) { placeLive(liveMap_, placement); });
  connect(bridge_, &TrainerBridge::replicaPlacementChanged, this,
          [this](int rank, const PlacementView& placement) { placeLive(replicaMap(rank), placement); });
  connect(bridge_, &TrainerBridge::replicaMemoryUpdated, this,
          [this](int rank, const QVector<MemoryView>& memory) { replicaMap(rank)->updateMemory(memory); });
  connect(bridge_, &TrainerBridge::throughputUpdated, this, [this](double imagesPerSec, int replicas) {
    imagesPerSec_ = imagesPerSec;
    replicas_ = replicas;
  });
  connect(bridge_, &TrainerBridge::sampleReady, this, [this](const SampleInfo& s) {
    if (queued_.removeAll(tr("a sample"))) updateRunHeader();
    samples_->addSample(s);
    latestStrip_->setSamples(samples_->latestSamples());
  });
  connect(bridge_, &TrainerBridge::checkpointSaved, this, [this](const QString& path, qint64 step) {
    if (queued_.removeAll(tr("a checkpoint"))) updateRunHeader();
    statusBar()->showMessage(tr("Checkpoint of step %1 saved: %2").arg(step).arg(path), 8000);
  });
  connect(bridge_, &TrainerBridge::loraExported, this, [this](const QString& path, const QString& format) {
    statusBar()->showMessage(tr("LoRA (%1) written: %2").arg(format, path), 8000);
  });
  connect(bridge_, &TrainerBridge::warning, this,
          [this](const QString& m) { statusBar()->showMessage(tr("Warning: %1").arg(m), 10000); });
  connect(bridge_, &TrainerBridge::note, this, [this](const QString& m) { statusBar()->showMessage(m, 10000); });
  connect(bridge_, &TrainerBridge::paused, this, [this](qint64 step) {
    step_ = step;
    updateRunHeader();
  });
  connect(bridge_, &TrainerBridge::resumed, this, [this](qint64) { updateRunHeader(); });
  connect(bridge_, &TrainerBridge::stopped, this, [this](qint64 step, const QString& checkpoint) {
    endPreparing();  // a stop during the load
    queued_.clear();
    // A stop by hand stops the queue too: the rest wait until Run queue is pressed again.
    finishQueuedRun(RunQueue::State::Stopped, tr("stopped at step %1 (resume it from its run folder)").arg(step));
    setQueueRunning(false);
    setRunHeader(checkpoint.isEmpty()
                     ? tr("Stopped at step %1, before its first checkpoint: nothing to resume from.").arg(step)
                     : tr("Stopped at step %1; checkpoint kept: %2. Press Resume run to go on from it, or Export "
                          "to write its LoRA.")
                           .arg(step)
                           .arg(checkpoint));
    updateRunControls();
  });
  connect(bridge_, &TrainerBridge::finished, this, [this](qint64 step, double finalLoss, const QStringList& exports) {
    queued_.clear();
    lastRunDone_ = true;
    finishQueuedRun(RunQueue::State::Finished, tr("%1 steps, final loss %2").arg(step).arg(finalLoss, 0, 'f', 4));
    progress_->setValue(progress_->maximum());
    setRunHeader(tr("Finished at step %1, final loss %2.%3")
                     .arg(step)
                     .arg(finalLoss, 0, 'f', 4)
                     .arg(exports.isEmpty() ? QString() : tr(" LoRA: %1").arg(exports.join(", "))));
    notify(tr("Training finished"),
           tr("%1: step %2, final loss %3").arg(QFileInfo(lastRunDir_).fileName()).arg(step).arg(finalLoss, 0, 'f', 4),
           false);
  });
  connect(bridge_, &TrainerBridge::failed, this,
          [this](const QString& message, qint64 step, const QString& lastCheckpoint) {
            endPreparing();  // a load that failed
            queued_.clear();
            // The whole message on one line: a preflight failure's reasons follow its first line.
            finishQueuedRun(RunQueue::State::Failed, QString(message).replace('\n', ' ').simplified() +
                                                         (step > 0 ? tr(" (at step %1)").arg(step) : QString()));
            QString text = message;
            if (step > 0) text += tr("\n\nFailed at step %1.").arg(step);
            if (!lastCheckpoint.isEmpty()) text += tr("\nLast good checkpoint: %1").arg(lastCheckpoint);
            setRunHeader(tr("The run failed: %1").arg(message.section('\n', 0, 0)));
            notify(tr("Training failed"), message.section('\n', 0, 0), true);
            showError(tr("Training failed"), text);
          });
  connect(bridge_, &TrainerBridge::exportFinished, this,
          [this](bool ok, const QString& message, const QStringList& files) {
            if (!ok) {
              showError(tr("Export failed"), message);
              return;
            }
            setRunHeader(tr("Exported %1 file(s): %2").arg(files.size()).arg(files.join(", ")));
            statusBar()->showMessage(tr("LoRA exported: %1").arg(files.join(", ")), 10000);
          });
}

// ---- before step 1: the model load and the cache -----------------------------------

// Before step 1 a large model takes minutes to stream in, and an images run
// encodes its dataset first: the bar counts blocks or items, and the header and
// the status line (seen from every tab) say what is going on.
void MainWindow::showPreparing(const QString& line, const QString& header, const QString& barFormat, qint64 done,
                               qint64 total) {
  preparing_ = line;
  progress_->setRange(0, int(std::max<qint64>(1, total)));
  progress_->setValue(int(std::clamp<qint64>(done, 0, std::max<qint64>(1, total))));
  progress_->setFormat(barFormat);
  setRunHeader(header);
  statusBar()->showMessage(line);
}

void MainWindow::showLoadProgress(const LoadProgressView& p) {
  const QString line = tr("Loading %1: %2 of %3").arg(p.title).arg(p.done).arg(p.total);
  showPreparing(line, tr("%1 (block by block; training starts once the model is in).").arg(line),
                tr("loading %1: %v / %m").arg(p.what), p.done, p.total);
}

void MainWindow::showCacheProgress(const CacheProgressView& p) {
  if (p.total <= 0) return;  // nothing to encode (no sample prompts)
  const QString line = tr("Caching %1: %2 of %3").arg(p.title).arg(p.done).arg(p.total);
  QString how;
  if (p.done == p.total && p.encoded == 0)
    how = tr("all from the cache");
  else if (p.encoded > 0 && p.itemsPerSecond > 0)
    how = tr("%1 per second").arg(p.itemsPerSecond, 0, 'f', 1);
  showPreparing(line, how.isEmpty() ? line + "." : tr("%1 (%2).").arg(line, how),
                tr("caching %1: %v / %m").arg(p.stage), p.done, p.total);
}

void MainWindow::endPreparing() {
  if (preparing_.isEmpty()) return;
  if (statusBar()->currentMessage() == preparing_) statusBar()->clearMessage();
  preparing_.clear();
  progress_->setFormat(tr("step %v / %m"));
}

QString MainWindow::preparingText() const { return preparing_; }

double MainWindow::shownStepMs() const {
  const qint64 left = totalSteps_ - step_;
  return etaSmoothed_ > 0 && left > 0 ? etaSmoothed_ * 1000.0 / double(left) : stepTimeMs_;
}

// ---- the run header --------------------------------------------------------------

void MainWindow::setRunHeader(const QString& text) { runStatus_->setText(text); }

QString MainWindow::runHeader() const { return runStatus_->text(); }

GpuMapView* MainWindow::replicaMap(int rank) {
  while (replicaMaps_.size() <= rank) {
    const int r = replicaMaps_.size();
    auto* map = new GpuMapView(liveMapTabs_);
    map->setObjectName(QString("replicaMap%1").arg(r));
    liveMapTabs_->addTab(map, tr("Replica %1").arg(r));
    replicaMaps_ << map;
  }
  if (liveMapTabs_->tabText(0) == tr("GPU map")) liveMapTabs_->setTabText(0, tr("Replica 0"));
  return replicaMaps_[rank];
}

void MainWindow::resetReplicaMaps() {
  while (replicaMaps_.size() > 1) {
    GpuMapView* map = replicaMaps_.takeLast();
    liveMapTabs_->removeTab(liveMapTabs_->indexOf(map));
    map->deleteLater();
  }
  liveMapTabs_->setTabText(0, tr("GPU map"));
  imagesPerSec_ = 0;
  replicas_ = 1;
}

void MainWindow::placeLive(GpuMapView* map, const PlacementView& placement) {
  PlacementView v = placement;
  applyBlockSizes(v, runBlockSizes_);
  // Names and sizes of this machine's devices, from the plan of the same machine.
  for (DeviceView& d : v.devices)
    for (const DeviceView& p : plannedMap_->placement().devices)
      if (p.label == d.label && !p.simulated) {
        if (d.name.isEmpty() || d.label == "cpu") d.name = p.name;
        if (!d.totalBytes) d.totalBytes = p.totalBytes;
      }
  map->setPlacement(v);
  // A replica's tab names its rank and its cards.
  const int rank = replicaMaps_.indexOf(map);
  if (rank < 0 || replicaMaps_.size() < 2) return;
  QStringList cards;
  for (const DeviceView& d : v.devices) cards << d.label;
  liveMapTabs_->setTabText(liveMapTabs_->indexOf(map), tr("Replica %1: %2").arg(rank).arg(cards.join(", ")));
}

void MainWindow::updateRunHeader() {
  const auto s = bridge_->state();
  const QString where = QFileInfo(lastRunDir_).fileName().isEmpty() ? lastRunDir_ : QFileInfo(lastRunDir_).fileName();
  QString text;
  if (s == TrainerBridge::State::Paused) {
    text = tr("Paused at step %1 of %2 (%3). Press Resume to go on.").arg(step_).arg(totalSteps_).arg(where);
  } else if (s == TrainerBridge::State::Stopping) {
    // Before step 1 (loading, caching) nothing is trained, so no checkpoint is written.
    text = !preparing_.isEmpty() || step_ == 0
               ? tr("Stopping: nothing is trained yet, so no checkpoint is written (the finished cache is kept).")
               : tr("Stopping after step %1: saving a checkpoint.").arg(step_);
  } else if (s == TrainerBridge::State::Running) {
    // The time per step and the time left are one figure (shownStepMs), so they agree.
    text = tr("Training %1: step %2 of %3, %4 ms per step")
               .arg(where)
               .arg(step_)
               .arg(totalSteps_)
               .arg(shownStepMs(), 0, 'f', 0);
    // A data-parallel run's throughput: rank 0's figure counts every replica's images.
    if (replicas_ > 1 && imagesPerSec_ > 0)
      text +=
          tr(", %1 images/s over %2 replicas").arg(imagesPerSec_, 0, 'f', imagesPerSec_ < 10 ? 2 : 1).arg(replicas_);
    if (etaSmoothed_ > 0) text += tr(", about %1 left").arg(formatEta(etaSmoothed_));
  } else {
    return;
  }
  if (!queued_.isEmpty())
    text += " " + tr("Waiting to be done after the next step%1: %2.")
                      .arg(s == TrainerBridge::State::Paused ? tr(" once training goes on") : QString())
                      .arg(queued_.join(tr(", ")));
  setRunHeader(text);
}

void MainWindow::queueRequest(const QString& what) {
  if (!bridge_->isActive()) return;
  if (!queued_.contains(what)) queued_ << what;
  queuedAtStep_ = step_;
  updateRunHeader();
}

bool MainWindow::openRunFolder(const QString& runDir) {
  if (!QFileInfo(runDir).isDir()) {
    showError(tr("Cannot open run folder"), tr("%1 is not a folder.").arg(runDir));
    return false;
  }
  lastRunDir_ = absolute(runDir);
  addRecent(kRecentRuns, lastRunDir_);
  samples_->setRunDir(lastRunDir_);
  latestStrip_->setSamples(samples_->latestSamples());
  lossPlot_->loadMetricsFile(runFile(lastRunDir_, &runner::RunFolderFiles::metrics));
  // Where it got to: the last logged step of the steps its config asked for.
  qint64 total = 0;
  if (ConfigDocument run; run.readRunFolderConfig(lastRunDir_)) {
    total = run.trainSteps();
    // The map shows the run's own config planned on this machine (the trainer reports the live
    // placement only while it runs).
    runBlockSizes_ = blockSizes(run, RunOverrides{});
    if (!bridge_->isActive()) resetReplicaMaps();
    liveMap_->setPlacement(planPlacementView(run, QString()));
  }
  const qint64 last = lossPlot_->lastStep();
  step_ = last;
  totalSteps_ = total;
  lastRunDone_ = total > 0 && last >= total;
  progress_->setRange(0, int(std::max<qint64>(1, total)));
  progress_->setValue(int(std::min(last, std::max<qint64>(1, total))));
  setRunHeader(
      total > 0 && last >= total
          ? tr("Run %1 finished: %2 of %3 steps. Export its LoRA (Run > Export).").arg(lastRunDir_).arg(last).arg(total)
          : tr("Run %1 stopped at step %2 of %3: press Resume run to go on, or Export to write its LoRA.")
                .arg(lastRunDir_)
                .arg(last)
                .arg(total));
  tabs_->setCurrentIndex(1);
  updateRunControls();
  return true;
}

// ---- run control ---------------------------------------------------------------

void MainWindow::startRun() {
  if (replanTimer_->isActive()) replan();  // the plan of the config as it is now
  if (const QString why = startBlocker(); !why.isEmpty()) {
    showError(tr("Cannot start"), why);
    return;
  }
  const ConfigDocument& doc = *editor_->document();
  RunOverrides run;
  run.steps = stepLimit_;
  // A relative output folder is the config's folder's, not the one the app was started in.
  run.trainingFolder = trainingFolderFor(doc.stringValue("job.training_folder"), editor_->filePath());
  runBlockSizes_ = blockSizes(doc, run);
  resetReplicaMaps();
  QString error;
  if (!bridge_->start(doc, run, &error))
    showError(tr("Cannot start"), error);
  else
    setRunHeader(startingHeader());
  updateRunControls();
}

void MainWindow::togglePause() {
  if (bridge_->state() == TrainerBridge::State::Paused)
    bridge_->resumeRun();
  else
    bridge_->pause();
}

void MainWindow::stopRun() { bridge_->stop(); }

void MainWindow::resumeRunFolder(const QString& dir) {
  const QString runDir = absolute(dir);
  // Block sizes for the live map from the run's own config.
  runBlockSizes_.clear();
  if (ConfigDocument run; run.readRunFolderConfig(runDir)) runBlockSizes_ = blockSizes(run, RunOverrides{});
  resetReplicaMaps();
  QString error;
  if (!bridge_->resume(runDir, &error)) {
    showError(tr("Cannot resume"), error);
    return;
  }
  lastRunDir_ = runDir;
  addRecent(kRecentRuns, runDir);
  setRunHeader(tr("Resuming %1: reading its checkpoint, then loading the model.").arg(runDir));
}

void MainWindow::showExportDialog() {
  QString runDir = bridge_->isActive() ? bridge_->runDir() : lastRunDir_;
  if (runDir.isEmpty()) {
    runDir = QFileDialog::getExistingDirectory(this, tr("Export the LoRA of which run folder?"));
    if (runDir.isEmpty()) return;
    lastRunDir_ = absolute(runDir);
    runDir = lastRunDir_;
  }
  // The run's own config says its family and formats; the editor's config when it cannot be read.
  ConfigDocument run;
  const ConfigDocument& runCfg = run.readRunFolderConfig(runDir) ? run : *editor_->document();
  const QStringList chosen = runCfg.exportFormats();
  QVector<ExportCheckpoint> checkpoints;
  for (const auto& c : runner::listCheckpoints(runDir.toStdString())) checkpoints.push_back({c.step, c.manual});
  // The folder the trainer writes its own exports to: one exports folder per run.
  auto* dialog = new ExportDialog(runDir, runCfg.family().toStdString(), chosen,
                                  runFile(runDir, &runner::RunFolderFiles::exportsDir), checkpoints, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this,
          [this, dialog] { exportWith(dialog->runDir(), dialog->outDir(), dialog->formats(), dialog->step()); });
  dialog->open();
}

// Asks before a file of the same name is replaced: replace it, keep both (a new
// name beside it), or cancel. Then the export runs on the bridge.
void MainWindow::exportWith(const QString& runDir, const QString& outDir, const QStringList& formats, qint64 step) {
  std::vector<std::string> fmts;
  for (const QString& f : formats) fmts.push_back(f.toStdString());
  QStringList there;
  try {
    for (const std::string& p : runner::exportPaths(runDir.toStdString(), outDir.toStdString(), fmts, step))
      if (QFileInfo::exists(QString::fromStdString(p))) there << QString::fromStdString(p);
  } catch (const std::exception& e) {
    showError(tr("Export failed"), QString::fromUtf8(e.what()));
    return;
  }
  auto existing = TrainerBridge::ExistingExport::Refuse;
  if (!there.isEmpty()) {
    QMessageBox box(QMessageBox::Question, tr("Export"),
                    tr("%n file(s) of this export are there already:", "", int(there.size())), QMessageBox::NoButton,
                    this);
    box.setObjectName("exportExistsDialog");
    box.setInformativeText(there.join('\n'));
    QPushButton* replace = box.addButton(tr("Replace"), QMessageBox::DestructiveRole);
    replace->setObjectName("exportReplace");
    QPushButton* both = box.addButton(tr("Keep both (a new name)"), QMessageBox::AcceptRole);
    both->setObjectName("exportKeepBoth");
    QPushButton* cancel = box.addButton(tr("Cancel"), QMessageBox::RejectRole);
    cancel->setObjectName("exportCancelReplace");
    box.setDefaultButton(both);
    box.setEscapeButton(cancel);
    box.exec();
    if (box.clickedButton() == replace)
      existing = TrainerBridge::ExistingExport::Overwrite;
    else if (box.clickedButton() == both)
      existing = TrainerBridge::ExistingExport::NewName;
    else
      return;
  }
  QString error;
  if (!bridge_->exportLora(runDir, outDir, formats, step, existing, &error)) showError(tr("Export failed"), error);
}

void MainWindow::updateRunControls() {
  const auto s = bridge_->state();
  const bool idle = s == TrainerBridge::State::Idle;
  const bool running = s == TrainerBridge::State::Running || s == TrainerBridge::State::Paused;
  const QString blocker = startBlocker();
  const bool canStart = idle && blocker.isEmpty();
  startButton_->setEnabled(canStart);
  startAction_->setEnabled(canStart);
  addToQueueButton_->setEnabled(blocker.isEmpty());
  addToQueueAction_->setEnabled(blocker.isEmpty());
  startButton_->setToolTip(!blocker.isEmpty() ? blocker
                           : idle             ? tr("Start a new run of this config (Ctrl+R)")
                                              : tr("A run is active: see the Run tab (Ctrl+2)"));
  // Why Start is off, said where Start is (not only in a tooltip).
  startBlocker_->setText(blocker);
  startBlocker_->setVisible(!blocker.isEmpty());
  pauseAction_->setEnabled(running);
  pauseButton_->setEnabled(running);
  const bool paused = s == TrainerBridge::State::Paused;
  pauseAction_->setText(paused ? tr("&Resume") : tr("&Pause"));
  pauseAction_->setIcon(style()->standardIcon(paused ? QStyle::SP_MediaPlay : QStyle::SP_MediaPause));
  pauseButton_->setText(paused ? tr("Resume") : tr("Pause"));
  pauseButton_->setIcon(pauseAction_->icon());
  pauseButton_->setToolTip(tr("%1 (Ctrl+P)").arg(pauseButton_->text()));
  stopAction_->setEnabled(running);
  stopButton_->setEnabled(running);
  stopButton_->setToolTip(tr("Stop after this step and keep a checkpoint (Ctrl+.)"));
  sampleAction_->setEnabled(running);
  sampleButton_->setEnabled(running);
  saveNowAction_->setEnabled(running);
  saveButton_->setEnabled(running);
  const bool canExport = idle && !lastRunDir_.isEmpty();
  exportAction_->setEnabled(idle);
  exportButton_->setEnabled(canExport);
  // Resume: the last run stopped (or failed) before its last step and left a checkpoint.
  const auto checkpoints = idle && !lastRunDir_.isEmpty() && !lastRunDone_
                               ? runner::listCheckpoints(lastRunDir_.toStdString())
                               : std::vector<runner::CheckpointInfo>{};
  resumeButton_->setEnabled(!checkpoints.empty());
  resumeButton_->setToolTip(
      checkpoints.empty()
          ? tr("Resumes a stopped run from its last checkpoint (none to resume now)")
          : tr("Go on with %1 from its checkpoint of step %2").arg(lastRunDir_).arg(checkpoints.back().step));
  stateLabel_->setText(stateText(s));
}

QString MainWindow::startBlocker() const {
  if (editor_->hasErrors()) {
    int errors = 0;
    for (const ProblemView& p : editor_->problems()) errors += p.error;
    return tr(
        "Start is off: %n setting(s) must be changed first. They are marked in red in the form and listed "
        "under it, each with what to change.",
        "", std::max(errors, 1));
  }
  if (!machinePlan_.refusal.isEmpty()) {
    const QString where = machineSpec_.isEmpty() ? tr("this machine's GPUs") : machineSpec_;
    QString why = machinePlan_.refusal;
    why.remove(QRegularExpression("^the model does not fit: "));
    QString text = tr("Start is off: the model does not fit %1 (%2).").arg(where, why);
    if (!machinePlan_.wayOut.isEmpty()) text += "\n" + tr("Ways out:") + "\n- " + machinePlan_.wayOut.join("\n- ");
    return text;
  }
  return QString();
}

// ---- the run queue ----------------------------------------------------------------

bool MainWindow::addToQueue() {
  if (replanTimer_->isActive()) replan();
  if (const QString why = startBlocker(); !why.isEmpty()) {
    showError(tr("Cannot queue this config"), why);
    return false;
  }
  const QString name = editor_->document()->stringValue("job.name");
  const QString source = editor_->filePath().isEmpty() ? tr("untitled") : absolute(editor_->filePath());
  queue_->add(name, source, editor_->yamlText());
  statusBar()->showMessage(tr("%1 added to the run queue (%2 entries); press Run queue in the Run tab to train them.")
                               .arg(name)
                               .arg(queue_->entries().size()),
                           8000);
  return true;
}

void MainWindow::setQueueRunning(bool run) {
  queueRunning_ = run;
  queuePanel_->setRunning(run);
  if (run && !bridge_->isActive()) startNextQueued();
}

// Starts the first waiting entry; one that cannot start is marked failed and the next is tried.
void MainWindow::startNextQueued() {
  if (!queueRunning_ || bridge_->isActive() || !queuedRunId_.isEmpty()) return;
  for (int i = queue_->nextWaiting(); i >= 0; i = queue_->nextWaiting()) {
    const RunQueue::Entry e = queue_->entries()[i];
    ConfigDocument queued;
    QVector<ProblemView> readProblems;
    if (!queued.readYaml(e.yaml, e.source, &readProblems, false)) {
      QStringList problems;
      for (const ProblemView& p : readProblems)
        if (p.error) problems << (p.key.isEmpty() ? p.message : p.key + ": " + p.message);
      queue_->setState(e.id, RunQueue::State::Failed, tr("the config does not read: %1").arg(problems.join("; ")));
      continue;
    }
    RunOverrides run;
    run.steps = stepLimit_;
    // Relative to the queued config's folder, as a Start of it would be.
    run.trainingFolder = trainingFolderFor(queued.stringValue("job.training_folder"),
                                           QFileInfo(e.source).isAbsolute() ? e.source : QString());
    runBlockSizes_ = blockSizes(queued, run);
    resetReplicaMaps();
    QString error;
    if (!bridge_->start(queued, run, &error)) {
      queue_->setState(e.id, RunQueue::State::Failed, error);
      continue;
    }
    queuedRunId_ = e.id;
    queue_->setState(e.id, RunQueue::State::Running, tr("starting"));
    setRunHeader(startingHeader());
    updateRunControls();
    return;
  }
  // Nothing left to train.
  int finished = 0, failed = 0;
  for (const RunQueue::Entry& x : queue_->entries()) {
    finished += x.state == RunQueue::State::Finished;
    failed += x.state == RunQueue::State::Failed;
  }
  setQueueRunning(false);
  notify(tr("Run queue done"), tr("%1 finished, %2 failed").arg(finished).arg(failed), failed > 0);
}

void MainWindow::finishQueuedRun(RunQueue::State state, const QString& message) {
  if (queuedRunId_.isEmpty()) return;
  queue_->setState(queuedRunId_, state, message);
  queuedRunId_.clear();
}

}  // namespace strata::ui
