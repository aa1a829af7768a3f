#pragma once
// The Strata window: run setup (config editor + planned GPU map), the live run
// (loss plot, live GPU map, latest samples, run control) and the sample browser.
// Recent configs and run folders (absolute paths), window geometry and splitters
// are kept in QSettings (a file path given by the caller; tests pass a temp file).
// Nothing is lost silently: the title marks unsaved edits, and opening another
// config, New, Quit and closing ask to save them; closing during a run asks
// whether to stop it (with a checkpoint) or keep training.
#include <QMainWindow>
#include <QMap>
#include <QSettings>
#include <memory>

#include "ui/backend/RunQueue.h"
#include "ui/widgets/Theme.h"
#include "ui/backend/TrainerBridge.h"
#include "ui/backend/ViewModel.h"

class QAction;
class QComboBox;
class QLabel;
class QLineEdit;
class QMenu;
class QProgressBar;
class QPushButton;
class QSplitter;
class QSystemTrayIcon;
class QTabWidget;
class QTimer;

namespace strata::ui {

class ConfigEditor;
class DatasetView;
class GpuMapView;
class GpuUsagePanel;
class RunQueuePanel;
class LossPlot;
class SampleBrowser;
class SampleStrip;
struct ConfigTemplate;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  static constexpr int kMaxRecent = 8;

  // `settingsPath`: an INI file for QSettings; empty = the user's default location.
  explicit MainWindow(const QString& settingsPath = QString(), QWidget* parent = nullptr);
  ~MainWindow() override;

  // Each asks to save unsaved edits first (false when the user cancels).
  bool openConfig(const QString& path);
  bool saveConfig(const QString& path);
  bool importAiToolkit(const QString& path);
  // A new, untitled config from a template (unsaved until saved). A template of the
  // user's own data asks for it (a folder of images, a .jsonl file), then for the
  // user's base model (cancel: set it later), unless `dataPath` is given (then
  // `modelPath` is taken as it is); false when the user cancels the data.
  bool newFromTemplate(const QString& templateId, const QString& dataPath = QString(),
                       const QString& modelPath = QString());
  // Shows a finished or stopped run: its samples (and metrics when the core writes them).
  bool openRunFolder(const QString& runDir);
  // Overrides train.steps of the next start (0 = the config's); for tests and quick demos.
  void setStepLimit(qint64 steps) { stepLimit_ = steps; }

  ConfigEditor* configEditor() const { return editor_; }
  GpuMapView* plannedMap() const { return plannedMap_; }
  GpuMapView* liveMap() const { return liveMap_; }
  // A data-parallel run's maps, one per replica (rank 0's is liveMap), each a tab of
  // liveMapTabs labelled with its rank and cards; one map for a run of one process.
  QVector<GpuMapView*> replicaMaps() const { return replicaMaps_; }
  QTabWidget* liveMapTabs() const { return liveMapTabs_; }
  // Setup's "N cards as R replicas of C cards" (its entries' data: R).
  QComboBox* replicasChoice() const { return replicasChoice_; }
  LossPlot* lossPlot() const { return lossPlot_; }
  SampleBrowser* sampleBrowser() const { return samples_; }
  TrainerBridge* bridge() const { return bridge_; }
  QTabWidget* tabs() const { return tabs_; }
  GpuUsagePanel* gpuUsagePanel() const { return gpuUsage_; }
  DatasetView* datasetView() const { return datasetView_; }
  RunQueue* runQueue() const { return queue_; }
  RunQueuePanel* runQueuePanel() const { return queuePanel_; }
  bool isQueueRunning() const { return queueRunning_; }
  Theme theme() const;
  QStringList recentConfigs() const;
  QStringList recentRunFolders() const;
  // The header line over the run view ("Paused at step 12 of 100 ...").
  QString runHeader() const;
  // Before step 1, what the run is doing ("Loading the transformer: 12 of 58",
  // "Caching the image latents: 40 of 500"); empty once training started.
  QString preparingText() const;
  // The time left the header shows (smoothed over steps), in seconds; 0 = unknown.
  double shownEtaSeconds() const { return etaSmoothed_; }
  // The time per step the header shows: the one the time left is made of.
  double shownStepMs() const;
  // Where a run of the config goes: job.training_folder resolved against the
  // config's folder (untitled, or a folder that cannot be written: ~/Strata), and
  // the job's name (the trainer takes the next free name when it holds a run).
  QString runFolder() const;
  // Why Start is off, in the user's words; empty when it may start.
  QString startBlocker() const;
  // The first-launch panel (the demo, a LoRA of your own images) is shown.
  bool isWelcomeShown() const;
  // The size of a window opened the first time on a screen of `available` size.
  static QSize defaultWindowSize(const QSize& available);
  // The devices Start is checked against: empty = this machine; a spec such as
  // "1x16GB" simulates them (tests, as strata-train run --devices).
  void setMachineDevices(const QString& spec);

 signals:
  // A run finished or failed: shown as a tray / desktop message where there is one.
  void notified(const QString& title, const QString& message);

 public slots:
  void startRun();
  void togglePause();
  void stopRun();
  void resumeRunFolder(const QString& runDir);
  void showExportDialog();
  void showNewConfigDialog();
  void replan();
  // Queues the config as it is now (false while it has errors).
  bool addToQueue();
  // Trains the waiting entries one after another (stops after the current run when off).
  void setQueueRunning(bool run);
  // The application's palette, the plots and the map follow; remembered in the settings.
  void setTheme(strata::ui::Theme theme);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildActions();
  void buildMenus();
  void buildSetupTab();
  void buildRunTab();
  void connectBridge();
  void updateRunControls();
  void updateTitle();
  void showError(const QString& title, const QString& message);
  void addRecent(const QString& key, const QString& path);
  void rebuildRecentMenus();
  void restoreState();
  void saveState();
  bool loadConfigFile(const QString& path);  // without asking to save
  bool importJob(const QString& path);
  bool loadTemplate(const ConfigTemplate& t, const QString& dataPath, const QString& modelPath);
  // Asks for a template's data (folder or file), then its base model; false when the data is cancelled.
  bool askTemplateInputs(const ConfigTemplate& t, QString* dataPath, QString* modelPath);
  void buildWelcome(QWidget* parent);
  void updateRunFolder();
  // job.training_folder (`trainingFolder`) resolved against the folder of the config at `configPath`.
  QString trainingFolderFor(const QString& trainingFolder, const QString& configPath) const;
  QString suggestedSavePath() const;
  void exportWith(const QString& runDir, const QString& outDir, const QStringList& formats, qint64 step);
  // Unsaved edits: asks Save / Discard / Cancel; true when it is fine to go on.
  bool maybeSave();
  bool saveCurrent();  // to its file, or asks for one
  void showImportReport(const QString& path, const QVector<ProblemView>& notes);
  void notify(const QString& title, const QString& message, bool failure);
  void updateRunHeader();
  void setRunHeader(const QString& text);
  void showPreparing(const QString& line, const QString& header, const QString& barFormat, qint64 done, qint64 total);
  void showLoadProgress(const LoadProgressView& progress);
  void showCacheProgress(const CacheProgressView& progress);
  void endPreparing();  // training started (or the run ended): the bar counts steps again
  void queueRequest(const QString& what);
  void startNextQueued();
  void finishQueuedRun(RunQueue::State state, const QString& message);
  // The live map of rank `rank` (made on its first event), and back to one map.
  GpuMapView* replicaMap(int rank);
  void resetReplicaMaps();
  void placeLive(GpuMapView* map, const PlacementView& placement);
  void fillReplicasChoice();

  std::unique_ptr<QSettings> settings_;
  TrainerBridge* bridge_ = nullptr;
  ConfigEditor* editor_ = nullptr;
  GpuMapView* plannedMap_ = nullptr;
  GpuMapView* liveMap_ = nullptr;
  QTabWidget* liveMapTabs_ = nullptr;
  QVector<GpuMapView*> replicaMaps_;  // by rank; [0] is liveMap_
  QComboBox* replicasChoice_ = nullptr;
  QLabel* replicasNote_ = nullptr;  // why the choice is off (one card, the CPU)
  LossPlot* lossPlot_ = nullptr;
  SampleBrowser* samples_ = nullptr;
  SampleStrip* latestStrip_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QSplitter* setupSplit_ = nullptr;
  QSplitter* runSplit_ = nullptr;
  QSplitter* runBottomSplit_ = nullptr;
  QLineEdit* deviceSpec_ = nullptr;
  QTimer* replanTimer_ = nullptr;
  QLabel* runStatus_ = nullptr;
  QLabel* runSetup_ = nullptr;  // how the base is held, from the run's start
  QLabel* deviceLabel_ = nullptr;
  QLabel* stateLabel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* startButton_ = nullptr;
  QPushButton* pauseButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
  QPushButton* sampleButton_ = nullptr;
  QPushButton* saveButton_ = nullptr;
  QPushButton* exportButton_ = nullptr;
  QAction* startAction_ = nullptr;
  QAction* pauseAction_ = nullptr;
  QAction* stopAction_ = nullptr;
  QAction* sampleAction_ = nullptr;
  QAction* saveNowAction_ = nullptr;
  QAction* exportAction_ = nullptr;
  QPushButton* resumeButton_ = nullptr;
  QWidget* welcome_ = nullptr;
  QLabel* runFolderLabel_ = nullptr;
  QPushButton* openRunFolderButton_ = nullptr;
  QLabel* startBlocker_ = nullptr;
  PlacementView machinePlan_;  // the config planned on the devices Start is checked against
  QString machineSpec_;        // those devices: empty = this machine
  bool lastRunDone_ = false;   // the last run reached its last step (nothing to resume)
  QMenu* recentConfigMenu_ = nullptr;
  QMenu* recentRunMenu_ = nullptr;
  QString lastRunDir_;
  QMap<QString, BlockView> runBlockSizes_;  // per-block sizes of the running config
  qint64 stepLimit_ = 0;
  // The run header's figures (from the last progress tick).
  qint64 step_ = 0, totalSteps_ = 0;
  double stepTimeMs_ = 0, etaSmoothed_ = 0;
  double imagesPerSec_ = 0;  // over all replicas
  int replicas_ = 1;
  QString preparing_;   // the load or cache line shown before step 1
  QStringList queued_;  // requests not done yet (sample, checkpoint): done after the next step
  qint64 queuedAtStep_ = 0;
  bool closeAfterStop_ = false;
  QSystemTrayIcon* tray_ = nullptr;
  QString baseStyleSheet_;
  QAction* darkThemeAction_ = nullptr;
  QAction* addToQueueAction_ = nullptr;
  QPushButton* addToQueueButton_ = nullptr;
  QTabWidget* setupSideTabs_ = nullptr;
  DatasetView* datasetView_ = nullptr;
  GpuUsagePanel* gpuUsage_ = nullptr;
  QSplitter* runTopSplit_ = nullptr;
  RunQueue* queue_ = nullptr;
  RunQueuePanel* queuePanel_ = nullptr;
  bool queueRunning_ = false;
  QString queuedRunId_;  // the queue entry the trainer runs now
};

}  // namespace strata::ui
