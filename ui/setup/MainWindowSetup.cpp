// The main window's Setup page: its tab, opening and saving configs, templates,
// the run folder a config trains into, and the planned GPU map.
#include "ui/app/MainWindow.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
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
#include <QSignalBlocker>
#include <QStandardItemModel>
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
}  // namespace

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
  // Data parallel on a machine of several cards: how its cards are shared out (model.replicas).
  auto* replicasRow = new QHBoxLayout;
  replicasChoice_ = new QComboBox(right);
  replicasChoice_->setObjectName("replicasChoice");
  replicasChoice_->setToolTip(
      tr("Train data-parallel: each replica is one process on its own group of the cards, taking its share of "
         "every batch (docs/data-parallel.md). Sets model.replicas and each replica's device set."));
  connect(replicasChoice_, QOverload<int>::of(&QComboBox::activated), this, [this](int index) {
    const QStringList settings = replicasChoice_->itemData(index, Qt::UserRole + 1).toStringList();
    for (int i = 0; i + 1 < settings.size(); i += 2) {
      QString error;
      if (!editor_->setValueText(settings[i], settings[i + 1], &error)) {
        showError(tr("Cannot share the cards out"), tr("%1: %2").arg(settings[i], error));
        break;
      }
    }
    replan();
  });
  replicasRow->addWidget(new QLabel(tr("Cards:"), right));
  replicasRow->addWidget(replicasChoice_, 1);
  rl->addLayout(replicasRow);
  replicasNote_ = new QLabel(right);
  replicasNote_->setObjectName("replicasNote");
  replicasNote_->setWordWrap(true);
  replicasNote_->hide();
  rl->addWidget(replicasNote_);
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

QString MainWindow::trainingFolderFor(const QString& trainingFolder, const QString& configPath) const {
  QString folder = trainingFolder.trimmed();
  if (QDir::isAbsolutePath(folder)) return QDir::cleanPath(folder);
  QString base = defaultRunsBase();
  if (!configPath.isEmpty()) {
    const QString dir = QFileInfo(configPath).absolutePath();
    if (QFileInfo(dir).isWritable()) base = dir;
  }
  return QDir::cleanPath(QDir(base).filePath(folder));
}

QString MainWindow::runFolder() const {
  const ConfigDocument& doc = *editor_->document();
  return QDir(trainingFolderFor(doc.stringValue("job.training_folder"), editor_->filePath()))
      .filePath(doc.stringValue("job.name"));
}

void MainWindow::updateRunFolder() {
  const QString folder = editor_->document()->stringValue("job.training_folder").trimmed();
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
  QString name = editor_->document()->stringValue("job.name").trimmed();
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

void MainWindow::replan() {
  replanTimer_->stop();
  const PlacementView planned = planPlacementView(*editor_->document(), deviceSpec_->text());
  plannedMap_->setPlacement(planned);
  fillReplicasChoice();
  // Start is checked against the devices that would train (this machine), whatever the map previews.
  machinePlan_ = deviceSpec_->text().trimmed() == machineSpec_.trimmed()
                     ? planned
                     : planPlacementView(*editor_->document(), machineSpec_);
  updateRunControls();
}

void MainWindow::fillReplicasChoice() {
  const ReplicaChoices choices = replicaChoices(*editor_->document(), deviceSpec_->text());
  const QSignalBlocker block(replicasChoice_);
  replicasChoice_->clear();
  const qint64 replicas = editor_->document()->valueText("model.replicas").toLongLong();
  replicasChoice_->addItem(replicas > 1 ? tr("As the config sets them (%1 replicas)").arg(replicas)
                                        : tr("As the config sets them (one process)"),
                           int(std::max<qint64>(replicas, 1)));
  auto* model = qobject_cast<QStandardItemModel*>(replicasChoice_->model());
  for (const ReplicaChoice& c : choices.choices) {
    QStringList settings;
    for (const auto& [key, value] : c.settings) settings << key << value;
    replicasChoice_->addItem(c.enabled ? c.text : tr("%1 (does not fit)").arg(c.text), c.replicas);
    const int row = replicasChoice_->count() - 1;
    replicasChoice_->setItemData(row, settings, Qt::UserRole + 1);
    if (!c.enabled) {
      replicasChoice_->setItemData(row, c.reason, Qt::ToolTipRole);
      if (model) model->item(row)->setEnabled(false);
    }
  }
  replicasChoice_->setCurrentIndex(choices.current >= 0 ? choices.current + 1 : 0);
  replicasChoice_->setEnabled(!choices.choices.isEmpty());
  replicasNote_->setText(choices.offReason);
  replicasNote_->setVisible(!choices.offReason.isEmpty());
}

void MainWindow::setMachineDevices(const QString& spec) {
  machineSpec_ = spec;
  replan();
}

}  // namespace strata::ui
