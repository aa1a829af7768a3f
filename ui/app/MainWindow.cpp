// The main window's shell: construction, actions and menus, the welcome page,
// recent files, notices, theme, window state and closing. The Setup page's part
// is ui/setup/MainWindowSetup.cpp, the Run page's ui/run/MainWindowRun.cpp.
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

// Resources of a static library are registered by hand, outside any namespace.
static void initStrataResources() { Q_INIT_RESOURCE(strata); }

namespace strata::ui {

namespace {
const char* kTheme = "view/theme";

// The queue file: beside a settings file given by the caller (tests), else in the app's data folder.
QString queueFileFor(const QString& settingsPath) {
  if (!settingsPath.isEmpty()) {
    const QFileInfo f(settingsPath);
    return f.absoluteDir().filePath(f.completeBaseName() + "-queue.json");
  }
  return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).filePath("queue.json");
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
    datasetView_->setDatasets(editor_->document()->datasets());
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
  datasetView_->setDatasets(editor_->document()->datasets());
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
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save run config"), suggestedSavePath(), tr("YAML (*.yaml)"));
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
      addButton("welcome_" + t.id, t.firstLaunch, [this, id = t.id] {
        newFromTemplate(id);
      })->setToolTip(t.firstLaunchTip);
  addButton("welcomeTemplatesButton", tr("Other templates..."), [this] { showNewConfigDialog(); });
  addButton("welcomeCloseButton", tr("Close"), [this] { welcome_->hide(); });
  welcome_ = box;
  welcome_->hide();
}

bool MainWindow::isWelcomeShown() const { return !welcome_->isHidden(); }

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
