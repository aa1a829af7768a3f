#pragma once
// --start / --export-when-done / --quit-when-done: the app trains the opened
// config as a user would, through its own widgets: it clicks Start, waits for
// the run to end, then (when asked) opens File > Export LoRA, ticks the formats
// and clicks Export. What happens is printed on stdout, one line per event, and
// with --quit-when-done the exit code says how it went. CI runs the installed
// app this way (tests/apps), so an app that cannot train fails the build.
#include <QObject>
#include <QString>
#include <QStringList>

namespace strata::ui {
class MainWindow;
}

namespace strata::app {

// No Q_OBJECT: it only connects lambdas (app/ runs no moc).
class ScriptedRun : public QObject {
 public:
  // Exit codes with --quit-when-done.
  static constexpr int kExitDone = 0;         // trained (and exported when asked)
  static constexpr int kExitFailed = 1;       // the run or the export failed, or was stopped
  static constexpr int kExitCannotStart = 2;  // the config did not open or has errors

  // `configOpened`: whether the window opened the config it was given.
  ScriptedRun(ui::MainWindow* window, bool configOpened, QStringList exportFormats, bool quitWhenDone);

  // Clicks Start (call once the window is shown).
  void begin();

 private:
  void runEnded(const QString& what, bool ok);
  void exportThroughDialog();
  void finish(int exitCode, const QString& line);

  ui::MainWindow* window_;
  bool configOpened_;
  QStringList exportFormats_;
  bool quitWhenDone_;
  bool exportWhenIdle_ = false;  // the run finished: export once the bridge is idle
  bool done_ = false;
};

}  // namespace strata::app
