#include "ui/MainWindow.h"

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
#include <optional>

#include "config/RunConfig.h"
#include "events/Events.h"
#include "ui/ConfigBackend.h"
#include "ui/ConfigEditor.h"
#include "ui/DatasetView.h"
#include "ui/ExportDialog.h"
#include "ui/GpuMapView.h"
#include "ui/GpuUsagePanel.h"
#include "ui/LossPlot.h"
#include "ui/NewConfigDialog.h"
#include "ui/PlanBackend.h"
#include "ui/RunQueue.h"
#include "ui/RunQueuePanel.h"
#include "ui/SampleBrowser.h"
#include "ui/Theme.h"
#include "ui/TrainerRunner.h"

// Resources of a static library are registered by hand, outside any namespace.
static void initStrataResources() { Q_INIT_RESOURCE(strata); }

namespace strata::ui {

namespace {
const char* kRecentConfigs = "recent/configs";
const char* kRecentRuns = "recent/runs";
const char* kTheme = "view/theme";

// The queue file: beside a settings file given by the caller (tests), else in the app's data folder.
QString queueFileFor(const QString& settingsPath) {
  if (!settingsPath.isEmpty()) {
    const QFileInfo f(settingsPath);
    return f.absoluteDir().filePath(f.completeBaseName() + "-queue.json");
  }
  return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).filePath("queue.json");
}

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
QString absolute(const QString& path) { return path.isEmpty() ? path : QFileInfo(path).absoluteFilePath(); }

// A run folder's config.yaml as the run used it; none when it cannot be read (not a
// regular file, over the config cap, errors). Read through the core's reader, which
// refuses a FIFO or a device there instead of blocking the window.
std::optional<config::RunConfig> readRunConfig(const QString& runDir) {
  try {
    const std::string path = runner::runFolderFiles(runDir.toStdString()).config;
    const backend::ParseResult parsed = backend::parseYaml(backend::readText(path), path);
    if (parsed.ok) return parsed.config;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

QString runFile(const QString& runDir, std::string runner::RunFolderFiles::*member) {
  return QString::fromStdString(runner::runFolderFiles(runDir.toStdString()).*member);
}

// Weight of the newest progress tick in the time-left estimate (ticks come every 150 ms).
constexpr double kEtaSmoothing = 0.1;

// A component a run streams in (events::LoadProgressEvent::what), in user words.
QString loadTitle(const QString& what) {
  if (what == QLatin1String(events::kLoadTransformer)) return QObject::tr("the transformer");
  if (what == QLatin1String(events::kLoadT5)) return QObject::tr("the T5 text encoder");
  if (what == QLatin1String(events::kLoadLanguageModel)) return QObject::tr("the language model");
  return what;
}

// A job name made from the name of the user's data: letters, digits, _ and - only.
QString jobNameFrom(const QString& dataPath) {
  const QFileInfo info(dataPath);
  QString base = info.isDir() ? info.fileName() : info.completeBaseName();
  base.replace(QRegularExpression("[^A-Za-z0-9_-]+"), "_");
  base.remove(QRegularExpression("^_+|_+$"));
  return (base.isEmpty() ? QString("my") : base.left(60)) + "_lora";
}

// Where a config that is not saved (or whose folder cannot be written) puts its runs.
QString defaultRunsBase() { return QDir::home().filePath("Strata"); }

// The header from Start until the first load or cache figure.
QString startingHeader() {
  return QObject::tr("Starting: checking the config and the devices, then loading the model.");
}

// A stage of an images run's cache (events::CacheProgressEvent::stage), in user words.
QString cacheTitle(const QString& stage) {
  if (stage == QLatin1String("latents")) return QObject::tr("the image latents");
  if (stage == QLatin1String("text")) return QObject::tr("the caption embeddings");
  if (stage == QLatin1String("sample prompts")) return QObject::tr("the sample prompts' embeddings");
  return stage;
}
}  // namespace

MainWindow::MainWindow(const QString& settingsPath, QWidget* parent)
    : QMainWindow(parent),
      settings_(settingsPath.isEmpty() ? std::make_unique<QSettings>("Strata", "strata")
                                       : std::make_unique<QSettings>(settingsPath, QSettings::IniFormat)) {
  initStrataResources();
  setObjectName("mainWindow");
  setWindowIcon(QIcon(":/strata/strata.svg"));
  QFile qss(":/strata/strata.qss");
  if (qss.open(QIODevice::ReadOnly)) baseStyleSheet_ = QString::fromUtf8(qss.readAll());
  setStyleSheet(baseStyleSheet_);
  queue_ = new RunQueue(queueFileFor(settingsPath), this);

  bridge_ = new TrainerBridge(this);
  tabs_ = new QTabWidget(this);
  tabs_->setObjectName("mainTabs");
  tabs_->setDocumentMode(true);
  setCentralWidget(tabs_);

  buildActions();
  buildSetupTab();
  buildRunTab();
  samples_ = new SampleBrowser(this);
  tabs_->addTab(samples_, tr("Samples"));
  buildMenus();

  deviceLabel_ = new QLabel(deviceSummary(), this);
  deviceLabel_->setObjectName("deviceSummary");
  deviceLabel_->setToolTip(tr("Compute devices of this machine"));
  stateLabel_ = new QLabel(this);
  stateLabel_->setObjectName("runStateLabel");
  statusBar()->addWidget(deviceLabel_, 1);
  statusBar()->addPermanentWidget(stateLabel_);

  connectBridge();
  connect(editor_, &ConfigEditor::validityChanged, this, &MainWindow::updateRunControls);
  connect(editor_, &ConfigEditor::problemsChanged, this, &MainWindow::updateRunControls);
  connect(editor_, &ConfigEditor::configChanged, this, [this] {
    replanTimer_->start();
    datasetView_->setDatasets(editor_->config().datasets);
  });
  connect(queue_, &RunQueue::saveFailed, this, [this](const QString& m) {
    statusBar()->showMessage(tr("The run queue could not be saved: %1").arg(m), 15000);
  });
  connect(queuePanel_, &RunQueuePanel::runToggled, this, &MainWindow::setQueueRunning);
  connect(editor_, &ConfigEditor::filePathChanged, this, &MainWindow::updateTitle);
  connect(editor_, &ConfigEditor::modifiedChanged, this, &MainWindow::updateTitle);
  connect(editor_, &ConfigEditor::configChanged, this, &MainWindow::updateRunFolder);
  connect(editor_, &ConfigEditor::filePathChanged, this, &MainWindow::updateRunFolder);
  restoreState();
  // First launch (no config opened before): the demo and a LoRA of your own images, up front.
  // A config given on the command line, or any config opened or made, puts it away.
  welcome_->setVisible(recentConfigs().isEmpty());
  updateRunFolder();
  updateRunControls();
  updateTitle();
  replan();
  datasetView_->setDatasets(editor_->config().datasets);
}

MainWindow::~MainWindow() = default;

// ---- construction -----------------------------------------------------------

void MainWindow::buildActions() {
  auto* st = style();
  startAction_ = new QAction(st->standardIcon(QStyle::SP_MediaPlay), tr("&Start"), this);
  startAction_->setObjectName("startAction");
  startAction_->setShortcut(QKeySequence("Ctrl+R"));
  connect(startAction_, &QAction::triggered, this, &MainWindow::startRun);
  pauseAction_ = new QAction(st->standardIcon(QStyle::SP_MediaPause), tr("&Pause"), this);
  pauseAction_->setObjectName("pauseAction");
  pauseAction_->setShortcut(QKeySequence("Ctrl+P"));
  connect(pauseAction_, &QAction::triggered, this, &MainWindow::togglePause);
  stopAction_ = new QAction(st->standardIcon(QStyle::SP_MediaStop), tr("S&top"), this);
  stopAction_->setObjectName("stopAction");
  stopAction_->setShortcut(QKeySequence("Ctrl+."));
  connect(stopAction_, &QAction::triggered, this, &MainWindow::stopRun);
  sampleAction_ = new QAction(tr("Sample &now"), this);
  sampleAction_->setObjectName("sampleNowAction");
  connect(sampleAction_, &QAction::triggered, this, [this] {
    bridge_->sampleNow();
    queueRequest(tr("a sample"));
  });
  saveNowAction_ = new QAction(st->standardIcon(QStyle::SP_DialogSaveButton), tr("Save &checkpoint now"), this);
  saveNowAction_->setObjectName("saveNowAction");
  connect(saveNowAction_, &QAction::triggered, this, [this] {
    bridge_->saveNow();
    queueRequest(tr("a checkpoint"));
  });
  addToQueueAction_ = new QAction(tr("&Add config to queue"), this);
  addToQueueAction_->setObjectName("addToQueueAction");
  addToQueueAction_->setShortcut(QKeySequence("Ctrl+Shift+R"));  // Start later
  connect(addToQueueAction_, &QAction::triggered, this, &MainWindow::addToQueue);
  exportAction_ = new QAction(tr("&Export LoRA..."), this);
  exportAction_->setObjectName("exportAction");
  connect(exportAction_, &QAction::triggered, this, &MainWindow::showExportDialog);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->setObjectName("fileMenu");
  QAction* a = file->addAction(tr("&New config..."), this, &MainWindow::showNewConfigDialog);
  a->setObjectName("newConfigAction");
  a->setShortcut(QKeySequence::New);
  a = file->addAction(tr("&Open config..."), this, [this] {
    if (!maybeSave()) return;
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open run config"), QString(), tr("YAML (*.yaml *.yml);;All files (*)"));
    if (!path.isEmpty()) loadConfigFile(path);
  });
  a->setObjectName("openConfigAction");
  a->setShortcut(QKeySequence::Open);
  recentConfigMenu_ = file->addMenu(tr("Recent configs"));
  recentConfigMenu_->setObjectName("recentConfigMenu");
  a = file->addAction(tr("&Save config"), this, &MainWindow::saveCurrent);
  a->setObjectName("saveConfigAction");
  a->setShortcut(QKeySequence::Save);
  a = file->addAction(tr("Save config &as..."), this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save run config"), suggestedSavePath(),
                                                      tr("YAML (*.yaml)"));
    if (!path.isEmpty()) saveConfig(path);
  });
  a->setObjectName("saveConfigAsAction");
  a = file->addAction(tr("&Import ai-toolkit job..."), this, [this] {
    if (!maybeSave()) return;
    const QString path = QFileDialog::getOpenFileName(this, tr("Import an ai-toolkit job file"), QString(),
                                                      tr("YAML (*.yaml *.yml);;All files (*)"));
    if (!path.isEmpty()) importJob(path);
  });
  a->setObjectName("importAiToolkitAction");
  file->addSeparator();
  a = file->addAction(tr("Open run &folder..."), this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run folder"), lastRunDir_);
    if (!dir.isEmpty()) openRunFolder(dir);
  });
  a->setObjectName("openRunFolderAction");
  recentRunMenu_ = file->addMenu(tr("Recent run folders"));
  recentRunMenu_->setObjectName("recentRunMenu");
  file->addSeparator();
  a = file->addAction(tr("&Quit"), this, &QWidget::close);
  a->setObjectName("quitAction");
  a->setShortcut(QKeySequence::Quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->setObjectName("viewMenu");
  const QStringList tabNames = {tr("&Setup"), tr("&Run"), tr("S&amples")};
  for (int i = 0; i < tabNames.size(); ++i) {
    a = view->addAction(tabNames[i], this, [this, i] { tabs_->setCurrentIndex(i); });
    a->setObjectName(QString("showTab%1Action").arg(i));
    a->setShortcut(QKeySequence(QString("Ctrl+%1").arg(i + 1)));
  }
  view->addSeparator();
  darkThemeAction_ = view->addAction(tr("&Dark theme"));
  darkThemeAction_->setObjectName("darkThemeAction");
  darkThemeAction_->setCheckable(true);
  connect(darkThemeAction_, &QAction::toggled, this,
          [this](bool dark) { setTheme(dark ? Theme::Dark : Theme::Light); });

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->setObjectName("runMenu");
  run->addAction(startAction_);
  run->addAction(pauseAction_);
  run->addAction(stopAction_);
  run->addSeparator();
  run->addAction(sampleAction_);
  run->addAction(saveNowAction_);
  run->addSeparator();
  run->addAction(addToQueueAction_);
  a = run->addAction(tr("&Resume run from folder..."), this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Resume a run"), lastRunDir_);
    if (!dir.isEmpty()) resumeRunFolder(dir);
  });
  a->setObjectName("resumeRunAction");
  run->addAction(exportAction_);
  rebuildRecentMenus();
}

void MainWindow::buildSetupTab() {
  editor_ = new ConfigEditor(this);
  auto* right = new QWidget(this);
  right->setObjectName("planPanel");
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(6, 0, 0, 0);
  auto* specRow = new QHBoxLayout;
  auto* specLabel = new QLabel(tr("Plan for devices:"), right);
  deviceSpec_ = new QLineEdit(right);
  deviceSpec_->setObjectName("deviceSpec");
  deviceSpec_->setPlaceholderText(tr("this machine (or e.g. 4x16GB, 24GB,16GB, cpu,2x80GB)"));
  deviceSpec_->setToolTip(
      tr("Simulated devices to plan for: see the split before you have the cards. "
         "Empty = the devices of this machine."));
  deviceSpec_->setClearButtonEnabled(true);
  specRow->addWidget(specLabel);
  specRow->addWidget(deviceSpec_, 1);
  rl->addLayout(specRow);
  plannedMap_ = new GpuMapView(right);
  plannedMap_->setObjectName("plannedMap");
  rl->addWidget(plannedMap_, 1);
  replanTimer_ = new QTimer(this);
  replanTimer_->setSingleShot(true);
  replanTimer_->setInterval(200);
  connect(replanTimer_, &QTimer::timeout, this, &MainWindow::replan);
  connect(deviceSpec_, &QLineEdit::textChanged, this, [this] { replanTimer_->start(); });

  // Plan and dataset share the right side; Start and Add to queue stay under both.
  auto* side = new QWidget(this);
  side->setObjectName("setupSide");
  auto* sl = new QVBoxLayout(side);
  sl->setContentsMargins(0, 0, 0, 0);
  setupSideTabs_ = new QTabWidget(side);
  setupSideTabs_->setObjectName("setupSideTabs");
  setupSideTabs_->setDocumentMode(true);
  setupSideTabs_->addTab(right, tr("Plan"));
  datasetView_ = new DatasetView(side);
  setupSideTabs_->addTab(datasetView_, tr("Dataset"));
  sl->addWidget(setupSideTabs_, 1);
  auto* startRow = new QHBoxLayout;
  addToQueueButton_ = new QPushButton(tr("Add to queue"), side);
  addToQueueButton_->setObjectName("addToQueueButton");
  addToQueueButton_->setToolTip(tr("Queue this config as it is now: queued runs train one after another (Run tab)"));
  connect(addToQueueButton_, &QPushButton::clicked, this, &MainWindow::addToQueue);
  startButton_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaPlay), tr("Start training"), side);
  startButton_->setObjectName("startButton");
  startButton_->setMinimumHeight(34);
  connect(startButton_, &QPushButton::clicked, this, &MainWindow::startRun);
  startRow->addStretch(1);
  startRow->addWidget(addToQueueButton_);
  startRow->addWidget(startButton_);
  // Where the run goes, in full, and a way to look there.
  auto* folderRow = new QHBoxLayout;
  runFolderLabel_ = new QLabel(side);
  runFolderLabel_->setObjectName("runFolderPath");
  runFolderLabel_->setWordWrap(true);
  runFolderLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  runFolderLabel_->setMinimumWidth(120);
  openRunFolderButton_ = new QPushButton(tr("Open folder"), side);
  openRunFolderButton_->setObjectName("openOutputFolderButton");
  connect(openRunFolderButton_, &QPushButton::clicked, this, [this] {
    // The run folder once a run made it, else the nearest folder above it that is there.
    QString dir = runFolder();
    while (!dir.isEmpty() && !QFileInfo(dir).isDir() && dir != QFileInfo(dir).absolutePath())
      dir = QFileInfo(dir).absolutePath();
    if (QFileInfo(dir).isDir()) QDesktopServices::openUrl(QUrl::fromLocalFile(dir));
  });
  folderRow->addWidget(runFolderLabel_, 1);
  folderRow->addWidget(openRunFolderButton_, 0, Qt::AlignTop);
  startBlocker_ = new QLabel(side);
  startBlocker_->setObjectName("startBlocker");
  startBlocker_->setWordWrap(true);
  startBlocker_->setMinimumWidth(120);
  startBlocker_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  startBlocker_->setStyleSheet("color: #b23c17;");
  startBlocker_->hide();
  sl->addLayout(folderRow);
  sl->addWidget(startBlocker_);
  sl->addLayout(startRow);

  setupSplit_ = new QSplitter(Qt::Horizontal, this);
  setupSplit_->setObjectName("setupSplitter");
  setupSplit_->addWidget(editor_);
  setupSplit_->addWidget(side);
  setupSplit_->setStretchFactor(0, 1);
  setupSplit_->setStretchFactor(1, 1);
  setupSplit_->setSizes({700, 700});  // four 16 GB cards fit the plan side of a 1400 px window
  auto* setupPage = new QWidget(this);
  setupPage->setObjectName("setupPage");
  auto* pl = new QVBoxLayout(setupPage);
  pl->setContentsMargins(0, 0, 0, 0);
  buildWelcome(setupPage);
  pl->addWidget(welcome_);
  pl->addWidget(setupSplit_, 1);
  tabs_->addTab(setupPage, tr("Setup"));
}

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
  latestStrip_ = new SampleStrip(page, 128);
  latestStrip_->setObjectName("runLatestSamples");
  runBottomSplit_ = new QSplitter(Qt::Horizontal, page);
  runBottomSplit_->setObjectName("runBottomSplitter");
  runBottomSplit_->addWidget(liveMap_);
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
            QStringList prompts;
            for (const std::string& p : editor_->config().sample.prompts) prompts << QString::fromStdString(p);
            samples_->setPrompts(prompts);
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
  connect(bridge_, &TrainerBridge::placementChanged, this, [this](const PlacementView& placement) {
    PlacementView v = placement;
    applyBlockSizes(v, runBlockSizes_);
    // Names and sizes of this machine's devices, from the plan of the same machine.
    for (DeviceView& d : v.devices)
      for (const DeviceView& p : plannedMap_->placement().devices)
        if (p.label == d.label && !p.simulated) {
          if (d.name.isEmpty() || d.label == "cpu") d.name = p.name;
          if (!d.totalBytes) d.totalBytes = p.totalBytes;
        }
    liveMap_->setPlacement(v);
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

void MainWindow::showLoadProgress(const QString& what, qint64 done, qint64 total) {
  const QString line = tr("Loading %1: %2 of %3").arg(loadTitle(what)).arg(done).arg(total);
  showPreparing(line, tr("%1 (block by block; training starts once the model is in).").arg(line),
                tr("loading %1: %v / %m").arg(what), done, total);
}

void MainWindow::showCacheProgress(const QString& stage, qint64 done, qint64 total, qint64 encoded,
                                   double itemsPerSecond) {
  if (total <= 0) return;  // nothing to encode (no sample prompts)
  const QString line = tr("Caching %1: %2 of %3").arg(cacheTitle(stage)).arg(done).arg(total);
  QString how;
  if (done == total && encoded == 0)
    how = tr("all from the cache");
  else if (encoded > 0 && itemsPerSecond > 0)
    how = tr("%1 per second").arg(itemsPerSecond, 0, 'f', 1);
  showPreparing(line, how.isEmpty() ? line + "." : tr("%1 (%2).").arg(line, how),
                tr("caching %1: %v / %m").arg(stage), done, total);
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

// ---- files ---------------------------------------------------------------------

bool MainWindow::maybeSave() {
  if (!editor_->isModified()) return true;
  QMessageBox box(QMessageBox::Warning, tr("Unsaved changes"),
                  tr("The run config \"%1\" has changes that are not saved.")
                      .arg(editor_->filePath().isEmpty() ? tr("untitled") : QFileInfo(editor_->filePath()).fileName()),
                  QMessageBox::NoButton, this);
  box.setObjectName("saveChangesDialog");
  box.setInformativeText(tr("Save them first?"));
  QPushButton* save = box.addButton(tr("Save"), QMessageBox::AcceptRole);
  save->setObjectName("saveChangesSave");
  QPushButton* discard = box.addButton(tr("Discard changes"), QMessageBox::DestructiveRole);
  discard->setObjectName("saveChangesDiscard");
  QPushButton* cancel = box.addButton(tr("Cancel"), QMessageBox::RejectRole);
  cancel->setObjectName("saveChangesCancel");
  box.setDefaultButton(save);
  box.setEscapeButton(cancel);
  box.exec();
  if (box.clickedButton() == save) return saveCurrent();
  return box.clickedButton() == discard;
}

bool MainWindow::saveCurrent() {
  QString path = editor_->filePath();
  if (path.isEmpty()) {
    // A new config is never written over another one unasked: Save asks where, named after the job.
    path = QFileDialog::getSaveFileName(this, tr("Save run config"), suggestedSavePath(), tr("YAML (*.yaml)"));
    if (path.isEmpty()) return false;
  }
  return saveConfig(path);
}

bool MainWindow::openConfig(const QString& path) { return maybeSave() && loadConfigFile(path); }

bool MainWindow::loadConfigFile(const QString& path) {
  QString error;
  if (!editor_->loadFile(path, &error)) {
    showError(tr("Cannot open config"), error);
    return false;
  }
  addRecent(kRecentConfigs, absolute(path));
  welcome_->hide();
  tabs_->setCurrentIndex(0);
  replan();
  return true;
}

bool MainWindow::saveConfig(const QString& path) {
  QString error;
  if (!editor_->saveFile(path, &error)) {
    showError(tr("Cannot save config"), error);
    return false;
  }
  addRecent(kRecentConfigs, absolute(path));
  statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
  return true;
}

bool MainWindow::importAiToolkit(const QString& path) { return maybeSave() && importJob(path); }

bool MainWindow::importJob(const QString& path) {
  QString error;
  if (!editor_->importAiToolkit(path, &error)) {
    showError(tr("Cannot import the ai-toolkit job"), error);
    return false;
  }
  welcome_->hide();
  tabs_->setCurrentIndex(0);
  replan();
  showImportReport(path, editor_->importNotes());
  return true;
}

// What an import dropped or changed, in a message the user sees (and in the
// problem list, where it stays until the next open or new config).
void MainWindow::showImportReport(const QString& path, const QVector<ProblemView>& notes) {
  auto* box = new QMessageBox(notes.isEmpty() ? QMessageBox::Information : QMessageBox::Warning,
                              tr("ai-toolkit job imported"), QString(), QMessageBox::Ok, this);
  box->setObjectName("importReport");
  box->setAttribute(Qt::WA_DeleteOnClose);
  if (notes.isEmpty()) {
    box->setText(tr("Every setting of %1 was carried over.").arg(QFileInfo(path).fileName()));
  } else {
    box->setText(tr("%1 setting(s) of %2 were dropped or changed:").arg(notes.size()).arg(QFileInfo(path).fileName()));
    QStringList lines;
    for (const ProblemView& n : notes)
      lines << "- " + (n.key.isEmpty() ? QString() : n.key + ": ") +
                   QString(n.message).remove(QRegularExpression("^import: "));
    box->setInformativeText(lines.mid(0, 8).join('\n') + (lines.size() > 8 ? tr("\n... (all in the details)") : ""));
    box->setDetailedText(lines.join('\n'));
  }
  box->setInformativeText(box->informativeText() + tr("\n\nThe config is not saved yet: save it to keep it."));
  box->open();
  statusBar()->showMessage(tr("Imported %1 (%2 setting(s) dropped or changed)").arg(path).arg(notes.size()), 10000);
}

void MainWindow::showNewConfigDialog() {
  if (!maybeSave()) return;
  auto* dialog = new NewConfigDialog(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this, [this, dialog] {
    const ConfigTemplate t = dialog->chosen();
    QString data, model;
    if (!t.dataKey.isEmpty() && !askTemplateInputs(t, &data, &model)) return;
    loadTemplate(t, data, model);
  });
  dialog->open();
}

bool MainWindow::newFromTemplate(const QString& templateId, const QString& dataPath, const QString& modelPath) {
  const ConfigTemplate* found = nullptr;
  for (const ConfigTemplate& t : configTemplates())
    if (t.id == templateId) found = &t;
  if (!found || !maybeSave()) return false;
  QString data = dataPath, model = modelPath;
  if (!found->dataKey.isEmpty() && data.isEmpty() && !askTemplateInputs(*found, &data, &model)) return false;
  return loadTemplate(*found, data, model);
}

bool MainWindow::askTemplateInputs(const ConfigTemplate& t, QString* dataPath, QString* modelPath) {
  *dataPath = t.dataIsFolder ? QFileDialog::getExistingDirectory(this, t.dataQuestion, QDir::homePath())
                             : QFileDialog::getOpenFileName(this, t.dataQuestion, QDir::homePath(),
                                                            tr("JSON lines (*.jsonl);;All files (*)"));
  if (dataPath->isEmpty()) return false;
  // The base model: the user's, picked now, or later in the form (where it is marked until set).
  if (!t.modelQuestion.isEmpty())
    *modelPath = QFileDialog::getExistingDirectory(this, t.modelQuestion, QFileInfo(*dataPath).absolutePath());
  return true;
}

bool MainWindow::loadTemplate(const ConfigTemplate& t, const QString& dataPath, const QString& modelPath) {
  const QString text = templateText(t);
  QString error;
  if (text.isEmpty() || !editor_->loadText(text, t.id + ".yaml", &error)) {
    showError(tr("Cannot create the config"), error.isEmpty() ? tr("The template %1 is missing.").arg(t.id) : error);
    return false;
  }
  if (!t.dataKey.isEmpty() && !dataPath.isEmpty()) {
    // The user's data, by its full path, and a job named after it.
    editor_->setValueText(t.dataKey, absolute(dataPath));
    editor_->setValueText("job.name", jobNameFrom(dataPath));
  }
  if (!t.modelKey.isEmpty() && !modelPath.isEmpty()) editor_->setValueText(t.modelKey, absolute(modelPath));
  // A new config: untitled, and unsaved until saved (Save asks where; closing asks first).
  editor_->setModified(true);
  welcome_->hide();
  editor_->showPage("basic");
  tabs_->setCurrentIndex(0);
  replan();
  statusBar()->showMessage(
      tr("New config from \"%1\", not saved yet: set what is marked, then save it (Ctrl+S).").arg(t.title), 10000);
  return true;
}

// ---- first launch, the output folder, saving -------------------------------------

void MainWindow::buildWelcome(QWidget* parent) {
  auto* box = new QFrame(parent);
  box->setObjectName("welcomePanel");
  box->setFrameShape(QFrame::StyledPanel);
  auto* l = new QHBoxLayout(box);
  auto* text = new QLabel(tr("<b>Welcome to Strata.</b> See the whole loop first: the demo trains a tiny model on "
                             "the CPU in a few minutes (loss, samples, checkpoints, the LoRA file). Or make a LoRA "
                             "of your own data: you pick its folder and the base model."),
                          box);
  text->setWordWrap(true);
  text->setMinimumWidth(200);
  l->addWidget(text, 1);
  auto addButton = [&](const QString& name, const QString& label, auto slot) {
    auto* b = new QPushButton(label, box);
    b->setObjectName(name);
    connect(b, &QPushButton::clicked, this, slot);
    l->addWidget(b);
    return b;
  };
  // The templates the families offer on a first launch (the demo, the user's own images).
  for (const ConfigTemplate& t : configTemplates())
    if (!t.firstLaunch.isEmpty())
      addButton("welcome_" + t.id, t.firstLaunch, [this, id = t.id] { newFromTemplate(id); })
          ->setToolTip(t.firstLaunchTip);
  addButton("welcomeTemplatesButton", tr("Other templates..."), [this] { showNewConfigDialog(); });
  addButton("welcomeCloseButton", tr("Close"), [this] { welcome_->hide(); });
  welcome_ = box;
  welcome_->hide();
}

bool MainWindow::isWelcomeShown() const { return !welcome_->isHidden(); }

QString MainWindow::trainingFolderFor(const config::RunConfig& cfg, const QString& configPath) const {
  QString folder = QString::fromStdString(cfg.job.trainingFolder).trimmed();
  if (QDir::isAbsolutePath(folder)) return QDir::cleanPath(folder);
  QString base = defaultRunsBase();
  if (!configPath.isEmpty()) {
    const QString dir = QFileInfo(configPath).absolutePath();
    if (QFileInfo(dir).isWritable()) base = dir;
  }
  return QDir::cleanPath(QDir(base).filePath(folder));
}

QString MainWindow::runFolder() const {
  const config::RunConfig& cfg = editor_->config();
  return QDir(trainingFolderFor(cfg, editor_->filePath())).filePath(QString::fromStdString(cfg.job.name));
}

void MainWindow::updateRunFolder() {
  const QString folder = QString::fromStdString(editor_->config().job.trainingFolder).trimmed();
  const bool relative = !QDir::isAbsolutePath(folder) && !folder.startsWith("~");
  const QString path = editor_->filePath();
  QString note;
  if (relative && path.isEmpty())
    note = tr(" (not saved yet: under %1 until the config is saved, then beside it)").arg(defaultRunsBase());
  else if (relative && !QFileInfo(QFileInfo(path).absolutePath()).isWritable())
    note = tr(" (the config's folder cannot be written: under %1 instead)").arg(defaultRunsBase());
  // "~/runs" is refused by the validator (only a shell expands it): no folder to show.
  if (folder.startsWith("~"))
    runFolderLabel_->setText(tr("Runs go to: unknown until job.training_folder is a full path (it starts with '~')"));
  else
    runFolderLabel_->setText(tr("Runs go to %1%2").arg(QDir::toNativeSeparators(runFolder()), note));
  runFolderLabel_->setToolTip(
      tr("The output folder (job.training_folder; a relative one is taken from the config's folder) and the job's "
         "name. A folder that holds an earlier run gets the next free name (_2, _3, ...)."));
}

QString MainWindow::suggestedSavePath() const {
  QString name = QString::fromStdString(editor_->config().job.name).trimmed();
  name.replace(QRegularExpression("[^A-Za-z0-9_.-]+"), "_");
  if (name.isEmpty()) name = "run";
  QString dir = QDir::homePath();
  if (!editor_->filePath().isEmpty())
    dir = QFileInfo(editor_->filePath()).absolutePath();
  else if (!recentConfigs().isEmpty())
    dir = QFileInfo(recentConfigs().front()).absolutePath();
  if (!QFileInfo(dir).isDir() || !QFileInfo(dir).isWritable()) dir = QDir::homePath();
  return QDir(dir).filePath(name + ".yaml");
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
  if (const auto parsed = readRunConfig(lastRunDir_)) {
    {
      total = parsed->train.steps;
      // The map shows the run's own config planned on this machine (the trainer reports the live
      // placement only while it runs).
      runBlockSizes_ = blockSizes(*parsed);
      liveMap_->setPlacement(planPlacementView(*parsed, QString()));
    }
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

void MainWindow::addRecent(const QString& key, const QString& path) {
  QStringList list = settings_->value(key).toStringList();
  list.removeAll(path);
  list.prepend(path);
  while (list.size() > kMaxRecent) list.removeLast();
  settings_->setValue(key, list);
  rebuildRecentMenus();
}

QStringList MainWindow::recentConfigs() const { return settings_->value(kRecentConfigs).toStringList(); }
QStringList MainWindow::recentRunFolders() const { return settings_->value(kRecentRuns).toStringList(); }

void MainWindow::rebuildRecentMenus() {
  if (!recentConfigMenu_) return;
  recentConfigMenu_->clear();
  for (const QString& p : recentConfigs()) {
    QAction* a = recentConfigMenu_->addAction(p, this, [this, p] { openConfig(p); });
    a->setEnabled(QFileInfo(p).isAbsolute() && QFileInfo::exists(p));
  }
  recentConfigMenu_->setEnabled(!recentConfigMenu_->isEmpty());
  recentRunMenu_->clear();
  for (const QString& p : recentRunFolders()) {
    QMenu* m = recentRunMenu_->addMenu(p);
    m->setEnabled(QFileInfo(p).isAbsolute() && QFileInfo(p).isDir());
    m->addAction(tr("Open (samples, export)"), this, [this, p] { openRunFolder(p); });
    m->addAction(tr("Resume training"), this, [this, p] { resumeRunFolder(p); });
  }
  recentRunMenu_->setEnabled(!recentRunMenu_->isEmpty());
}

// ---- run control ---------------------------------------------------------------

void MainWindow::startRun() {
  if (replanTimer_->isActive()) replan();  // the plan of the config as it is now
  if (const QString why = startBlocker(); !why.isEmpty()) {
    showError(tr("Cannot start"), why);
    return;
  }
  config::RunConfig cfg = editor_->config();
  if (stepLimit_ > 0) cfg.train.steps = stepLimit_;
  // A relative output folder is the config's folder's, not the one the app was started in.
  cfg.job.trainingFolder = trainingFolderFor(cfg, editor_->filePath()).toStdString();
  runBlockSizes_ = blockSizes(cfg);
  QString error;
  if (!bridge_->start(cfg, &error))
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
  if (const auto parsed = readRunConfig(runDir)) runBlockSizes_ = blockSizes(*parsed);
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
  const config::RunConfig runCfg = readRunConfig(runDir).value_or(editor_->config());
  QStringList chosen;
  for (auto f : runCfg.save.exportFormats) chosen << QString::fromStdString(config::enumName(f));
  QVector<ExportCheckpoint> checkpoints;
  for (const auto& c : runner::listCheckpoints(runDir.toStdString())) checkpoints.push_back({c.step, c.manual});
  // The folder the trainer writes its own exports to: one exports folder per run.
  auto* dialog = new ExportDialog(runDir, runCfg.model.arch, chosen,
                                  runFile(runDir, &runner::RunFolderFiles::exportsDir), checkpoints, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this, [this, dialog] {
    exportWith(dialog->runDir(), dialog->outDir(), dialog->formats(), dialog->step());
  });
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
  resumeButton_->setToolTip(checkpoints.empty()
                                ? tr("Resumes a stopped run from its last checkpoint (none to resume now)")
                                : tr("Go on with %1 from its checkpoint of step %2")
                                      .arg(lastRunDir_)
                                      .arg(checkpoints.back().step));
  stateLabel_->setText(stateText(s));
}

void MainWindow::replan() {
  replanTimer_->stop();
  const PlacementView planned = planPlacementView(editor_->config(), deviceSpec_->text());
  plannedMap_->setPlacement(planned);
  // Start is checked against the devices that would train (this machine), whatever the map previews.
  machinePlan_ = deviceSpec_->text().trimmed() == machineSpec_.trimmed()
                     ? planned
                     : planPlacementView(editor_->config(), machineSpec_);
  updateRunControls();
}

void MainWindow::setMachineDevices(const QString& spec) {
  machineSpec_ = spec;
  replan();
}

QString MainWindow::startBlocker() const {
  if (editor_->hasErrors()) {
    int errors = 0;
    for (const ProblemView& p : editor_->problems()) errors += p.error;
    return tr("Start is off: %n setting(s) must be changed first. They are marked in red in the form and listed "
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

void MainWindow::showError(const QString& title, const QString& message) {
  // Non-modal to the event loop (open(), not exec()): the run keeps reporting behind it.
  auto* box = new QMessageBox(QMessageBox::Critical, title, message.section('\n', 0, 0), QMessageBox::Ok, this);
  box->setObjectName("errorDialog");
  if (message.contains('\n')) box->setDetailedText(message);
  box->setInformativeText(message.count('\n') > 0 ? message.section('\n', 1, 6) : QString());
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

// A tray message where the desktop has a tray; otherwise the taskbar entry asks
// for attention. Either way the status bar says it too.
void MainWindow::notify(const QString& title, const QString& message, bool failure) {
  if (QSystemTrayIcon::isSystemTrayAvailable()) {
    if (!tray_) {
      tray_ = new QSystemTrayIcon(windowIcon(), this);
      tray_->setObjectName("trayIcon");
      tray_->setToolTip(tr("Strata"));
    }
    tray_->show();
    tray_->showMessage(title, message, failure ? QSystemTrayIcon::Critical : QSystemTrayIcon::Information, 10000);
  } else {
    QApplication::alert(this);
  }
  statusBar()->showMessage(title + ": " + message, 15000);
  emit notified(title, message);
}

// ---- the run queue ----------------------------------------------------------------

bool MainWindow::addToQueue() {
  if (replanTimer_->isActive()) replan();
  if (const QString why = startBlocker(); !why.isEmpty()) {
    showError(tr("Cannot queue this config"), why);
    return false;
  }
  const QString name = QString::fromStdString(editor_->config().job.name);
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
    const backend::ParseResult parsed = backend::parseYaml(e.yaml.toStdString(), e.source.toStdString());
    if (!parsed.ok) {
      QStringList problems;
      for (const ProblemView& p : parsed.problems)
        if (p.error) problems << (p.key.isEmpty() ? p.message : p.key + ": " + p.message);
      queue_->setState(e.id, RunQueue::State::Failed, tr("the config does not read: %1").arg(problems.join("; ")));
      continue;
    }
    config::RunConfig cfg = parsed.config;
    if (stepLimit_ > 0) cfg.train.steps = stepLimit_;
    // Relative to the queued config's folder, as a Start of it would be.
    cfg.job.trainingFolder =
        trainingFolderFor(cfg, QFileInfo(e.source).isAbsolute() ? e.source : QString()).toStdString();
    runBlockSizes_ = blockSizes(cfg);
    QString error;
    if (!bridge_->start(cfg, &error)) {
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

// ---- theme -----------------------------------------------------------------------

void MainWindow::setTheme(Theme theme) {
  applyTheme(theme);
  setStyleSheet(baseStyleSheet_ + themeStyleSheet(theme));
  if (darkThemeAction_->isChecked() != (theme == Theme::Dark)) {
    const QSignalBlocker block(darkThemeAction_);
    darkThemeAction_->setChecked(theme == Theme::Dark);
  }
  settings_->setValue(kTheme, themeName(theme));
  settings_->sync();
}

Theme MainWindow::theme() const { return currentTheme(); }

void MainWindow::updateTitle() {
  const QString file = editor_->filePath().isEmpty() ? tr("untitled") : QFileInfo(editor_->filePath()).fileName();
  // [*] is where Qt puts the modified mark.
  setWindowTitle(tr("%1[*] - Strata").arg(file));
  setWindowModified(editor_->isModified());
}

// ---- window state ---------------------------------------------------------------

QSize MainWindow::defaultWindowSize(const QSize& available) {
  const QSize wanted(1400, 900);
  return available.isValid() ? wanted.boundedTo(available) : wanted;
}

void MainWindow::restoreState() {
  // The first time: 1400 x 900, or the screen's size where it is smaller (a 1024 x 700 laptop).
  if (!restoreGeometry(settings_->value("window/geometry").toByteArray()))
    resize(defaultWindowSize(screen() ? screen()->availableGeometry().size() : QSize()));
  QMainWindow::restoreState(settings_->value("window/state").toByteArray());
  setupSplit_->restoreState(settings_->value("window/setupSplit").toByteArray());
  runSplit_->restoreState(settings_->value("window/runSplit").toByteArray());
  runBottomSplit_->restoreState(settings_->value("window/runBottomSplit").toByteArray());
  runTopSplit_->restoreState(settings_->value("window/runTopSplit").toByteArray());
  setTheme(themeFromName(settings_->value(kTheme, "light").toString()));
  tabs_->setCurrentIndex(settings_->value("window/tab", 0).toInt());
  deviceSpec_->setText(settings_->value("plan/deviceSpec").toString());
  // Entries from before paths were stored absolute cannot be found again: dropped.
  for (const char* key : {kRecentConfigs, kRecentRuns}) {
    QStringList list = settings_->value(key).toStringList();
    list.erase(std::remove_if(list.begin(), list.end(), [](const QString& p) { return !QFileInfo(p).isAbsolute(); }),
               list.end());
    settings_->setValue(key, list);
  }
  rebuildRecentMenus();
  const QStringList runs = recentRunFolders();
  if (!runs.isEmpty() && QFileInfo(runs.front()).isDir()) lastRunDir_ = runs.front();
}

void MainWindow::saveState() {
  settings_->setValue("window/geometry", saveGeometry());
  settings_->setValue("window/state", QMainWindow::saveState());
  settings_->setValue("window/setupSplit", setupSplit_->saveState());
  settings_->setValue("window/runSplit", runSplit_->saveState());
  settings_->setValue("window/runBottomSplit", runBottomSplit_->saveState());
  settings_->setValue("window/runTopSplit", runTopSplit_->saveState());
  settings_->setValue("window/tab", tabs_->currentIndex());
  settings_->setValue("plan/deviceSpec", deviceSpec_->text());
  settings_->sync();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (bridge_->isActive()) {
    if (closeAfterStop_) {  // already stopping; the window closes when the checkpoint is written
      event->ignore();
      return;
    }
    QMessageBox box(QMessageBox::Question, tr("A run is training"),
                    tr("Training is still running (step %1 of %2).").arg(step_).arg(totalSteps_), QMessageBox::NoButton,
                    this);
    box.setObjectName("closeDuringRunDialog");
    box.setInformativeText(tr("Stop it now? A checkpoint is saved first, and you can resume it later."));
    QPushButton* stop = box.addButton(tr("Stop (save a checkpoint) and close"), QMessageBox::AcceptRole);
    stop->setObjectName("stopAndClose");
    QPushButton* keep = box.addButton(tr("Keep training"), QMessageBox::RejectRole);
    keep->setObjectName("keepTraining");
    box.setDefaultButton(keep);
    box.setEscapeButton(keep);
    box.exec();
    if (box.clickedButton() != stop) {
      event->ignore();
      return;
    }
    if (!maybeSave()) {
      event->ignore();
      return;
    }
    saveState();
    closeAfterStop_ = true;
    bridge_->stop();
    statusBar()->showMessage(tr("Saving a checkpoint, then closing..."));
    event->ignore();  // closed from stateChanged once the trainer is idle
    return;
  }
  if (!closeAfterStop_ && !maybeSave()) {
    event->ignore();
    return;
  }
  saveState();
  event->accept();
}

}  // namespace strata::ui
