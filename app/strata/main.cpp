// strata: the desktop app. Everything is in ui/; this only parses the command
// line, sets the look and opens the window.
#include <unistd.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QStyleFactory>
#include <QTimer>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ScreenshotTour.h"
#include "ScriptedRun.h"
#include "common/Version.h"
#include "families/Registration.h"
#include "ui/app/MainWindow.h"

namespace {

bool isSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

// Without a display Qt would stop with "no Qt platform plugin could be
// initialized. Reinstalling the application may fix this problem", which is
// wrong advice. Say what is missing and what works instead. --help and
// --version need no window: they run on the offscreen platform.
bool reportMissingDisplay(int argc, char** argv) {
  if (isSet("QT_QPA_PLATFORM") || isSet("DISPLAY") || isSet("WAYLAND_DISPLAY")) return false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-platform") == 0) return false;
    for (const char* info : {"-h", "--help", "--help-all", "-v", "--version"})
      if (std::strcmp(argv[i], info) == 0) {
        setenv("QT_QPA_PLATFORM", "offscreen", 1);
        return false;
      }
  }
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  std::string config;
  for (int i = 1; i < argc && config.empty(); ++i) {
    const std::string a = argv[i];
    const auto ends = [&a](const std::string& ext) {
      return a.size() > ext.size() && a.compare(a.size() - ext.size(), ext.size(), ext) == 0;
    };
    if (ends(".yaml") || ends(".yml")) config = a;
  }
  if (config.empty()) config = "CONFIG.yaml";
  std::fprintf(stderr,
               "strata: no display to open a window on (DISPLAY and WAYLAND_DISPLAY are not set).\n"
               "  Train without a window:   strata-train run %s\n"
               "  Or show the app over VNC: QT_QPA_PLATFORM=vnc strata %s, then connect a VNC viewer to %s:5900\n",
               config.c_str(), config.c_str(), host);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (reportMissingDisplay(argc, argv)) return 2;
  strata::families::registerAll();
  std::signal(SIGXFSZ, SIG_IGN);  // past ulimit -f a write fails with EFBIG and says so (as strata-train)
  QApplication app(argc, argv);
  QApplication::setApplicationName("Strata");
  QApplication::setOrganizationName("Strata");
  QApplication::setApplicationVersion(strata::kVersion);
  QApplication::setStyle(QStyleFactory::create("Fusion"));

  QCommandLineParser cli;
  cli.setApplicationDescription(
      "Strata: LoRA training for FLUX.1, FLUX.2 and Llama-family models, split over several GPUs.");
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument("config", "A run config (YAML) or an ai-toolkit job file to open.", "[config]");
  QCommandLineOption settingsOpt("settings", "Keep window state and recent files in this INI file.", "file");
  QCommandLineOption stepsOpt("steps", "Override train.steps of runs started from the app.", "n");
  QCommandLineOption devicesOpt("plan-devices", "Plan for simulated devices, e.g. 4x16GB.", "spec");
  QCommandLineOption runDirOpt("run-folder", "Open a run folder (samples, metrics, export).", "dir");
  QCommandLineOption shotsOpt("screenshot-dir",
                              "Start the config, grab every view into this folder as PNG files, then quit.", "dir");
  QCommandLineOption planConfigOpt("screenshot-plan-config",
                                   "With --screenshot-dir: the config shown planned on 4x16GB.", "yaml");
  QCommandLineOption startOpt("start", "Start training the config once the window is open, as the Start button does.");
  QCommandLineOption exportOpt("export-when-done",
                               "When the run finishes, export its LoRA through File > Export LoRA in these formats "
                               "(comma-separated: diffusers, kohya, comfy, peft).",
                               "formats");
  QCommandLineOption quitOpt("quit-when-done",
                             "With --start: quit when the run (and the export) is over. Exit code 0 done, 1 failed "
                             "or stopped, 2 could not start.");
  cli.addOptions({settingsOpt, stepsOpt, devicesOpt, runDirOpt, shotsOpt, planConfigOpt, startOpt, exportOpt, quitOpt});
  cli.process(app);

  strata::ui::MainWindow window(cli.value(settingsOpt));
  if (cli.isSet(stepsOpt)) window.setStepLimit(cli.value(stepsOpt).toLongLong());
  const QStringList args = cli.positionalArguments();
  const bool configOpened = !args.isEmpty() && window.openConfig(args.front());
  if (cli.isSet(runDirOpt)) window.openRunFolder(cli.value(runDirOpt));
  if (cli.isSet(devicesOpt)) window.findChild<QWidget*>("deviceSpec")->setProperty("text", cli.value(devicesOpt));
  window.show();

  std::unique_ptr<strata::app::ScreenshotTour> tour;
  if (cli.isSet(shotsOpt)) {
    tour = std::make_unique<strata::app::ScreenshotTour>(&window, cli.value(shotsOpt), cli.value(planConfigOpt));
    QTimer::singleShot(300, [&] { tour->begin(); });
  }
  if (cli.isSet(startOpt)) {
    QStringList formats;
    for (const QString& f : cli.value(exportOpt).split(',', Qt::SkipEmptyParts)) formats << f.trimmed();
    auto* scripted = new strata::app::ScriptedRun(&window, configOpened, formats, cli.isSet(quitOpt));
    QTimer::singleShot(0, scripted, &strata::app::ScriptedRun::begin);
  } else if (cli.isSet(exportOpt) || cli.isSet(quitOpt)) {
    std::fprintf(stderr, "strata: --export-when-done and --quit-when-done go with --start\n");
    return 2;
  }
  return app.exec();
}
