// strata: the desktop app. Everything is in ui/; this only parses the command
// line, sets the look and opens the window.
#include <QApplication>
#include <QCommandLineParser>
#include <QStyleFactory>
#include <QTimer>

#include "ScreenshotTour.h"
#include "common/Version.h"
#include "ui/MainWindow.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("Strata");
  QApplication::setOrganizationName("Strata");
  QApplication::setApplicationVersion(strata::kVersion);
  QApplication::setStyle(QStyleFactory::create("Fusion"));

  QCommandLineParser cli;
  cli.setApplicationDescription("Strata: LoRA training for diffusion transformers split over several GPUs.");
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
  cli.addOptions({settingsOpt, stepsOpt, devicesOpt, runDirOpt, shotsOpt, planConfigOpt});
  cli.process(app);

  strata::ui::MainWindow window(cli.value(settingsOpt));
  if (cli.isSet(stepsOpt)) window.setStepLimit(cli.value(stepsOpt).toLongLong());
  const QStringList args = cli.positionalArguments();
  if (!args.isEmpty()) window.openConfig(args.front());
  if (cli.isSet(runDirOpt)) window.openRunFolder(cli.value(runDirOpt));
  if (cli.isSet(devicesOpt)) window.findChild<QWidget*>("deviceSpec")->setProperty("text", cli.value(devicesOpt));
  window.show();

  std::unique_ptr<strata::app::ScreenshotTour> tour;
  if (cli.isSet(shotsOpt)) {
    tour = std::make_unique<strata::app::ScreenshotTour>(&window, cli.value(shotsOpt),
                                                         cli.value(planConfigOpt));
    QTimer::singleShot(300, [&] { tour->begin(); });
  }
  return app.exec();
}
