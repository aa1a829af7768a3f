#include "ScreenshotTour.h"

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QLineEdit>
#include <QPixmap>
#include <QSplitter>
#include <QTabWidget>
#include <QTextStream>
#include <QTimer>
#include <algorithm>
#include <cstdio>

#include "ui/setup/ConfigEditor.h"
#include "ui/setup/DatasetView.h"
#include "ui/widgets/GpuMapView.h"
#include "ui/widgets/LossPlot.h"
#include "ui/app/MainWindow.h"
#include "ui/backend/RunQueue.h"
#include "ui/widgets/SampleBrowser.h"

namespace strata::app {

namespace {
constexpr int kPollMs = 200;
constexpr int kRunTimeoutMs = 15 * 60 * 1000;

// A small photo folder for the dataset view: shapes on backgrounds in several sizes
// and aspect ratios with captions, one image without a caption, one truncated file.
QString writeTourPhotos() {
  const QString dir = QDir::current().filePath("tour-photos");
  QDir().mkpath(dir);
  struct Photo {
    const char* name;
    int w, h;
    QColor back, shape;
    bool circle;
    const char* caption;  // nullptr: no caption file
  };
  const Photo photos[] = {
      {"red-circle", 96, 96, QColor(30, 30, 40), Qt::red, true, "a red circle on a dark background"},
      {"green-square", 128, 96, QColor(235, 235, 225), QColor(40, 170, 60), false,
       "a green square on a light background"},
      {"blue-circle", 96, 128, QColor(235, 235, 225), QColor(40, 80, 200), true, "a blue circle on a light background"},
      {"yellow-square", 160, 96, QColor(30, 30, 40), QColor(230, 200, 30), false, "a [trigger] yellow square"},
      {"magenta-circle", 96, 96, QColor(30, 30, 40), QColor(200, 40, 180), true, nullptr},
      {"cyan-square", 96, 160, QColor(235, 235, 225), QColor(30, 190, 200), false, "a cyan square"},
      {"small", 20, 20, QColor(30, 30, 40), Qt::red, true, "too small to train"},
  };
  for (const Photo& p : photos) {
    QImage img(p.w, p.h, QImage::Format_RGB888);
    img.fill(p.back);
    QPainter painter(&img);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(Qt::NoPen);
    painter.setBrush(p.shape);
    const int side = std::min(p.w, p.h) / 2;
    const QRect r(p.w / 2 - side / 2, p.h / 2 - side / 2, side, side);
    if (p.circle)
      painter.drawEllipse(r);
    else
      painter.drawRect(r);
    painter.end();
    img.save(dir + "/" + p.name + ".png");
    if (p.caption) {
      QFile f(dir + "/" + p.name + ".txt");
      if (f.open(QIODevice::WriteOnly)) f.write(p.caption);
    }
  }
  QFile broken(dir + "/broken.png");
  if (broken.open(QIODevice::WriteOnly)) broken.write("\x89PNG\r\n\x1a\n cut off here");
  return dir;
}
}  // namespace

ScreenshotTour::ScreenshotTour(ui::MainWindow* window, QString dir, QString planConfig)
    : window_(window), dir_(std::move(dir)), planConfig_(std::move(planConfig)) {
  QDir().mkpath(dir_);
  timer_ = new QTimer;
  timer_->setInterval(kPollMs);
  QObject::connect(timer_, &QTimer::timeout, [this] { next(); });

  auto always = [] { return true; };
  ui::ConfigEditor* editor = window_->configEditor();
  auto* tabs = window_->tabs();
  auto* spec = window_->findChild<QLineEdit*>("deviceSpec");

  // 1. Setup: the loaded config and its planned placement on this machine.
  steps_.push_back({always,
                    [=] {
                      window_->resize(1560, 960);
                      if (auto* split = window_->findChild<QSplitter*>("setupSplitter")) split->setSizes({600, 960});
                      originalYaml_ = editor->yamlText();
                      originalPath_ = editor->filePath();
                      tabs->setCurrentIndex(0);
                    },
                    0});
  steps_.push_back({always, [=] { shoot("setup"); }, 0});
  steps_.push_back({always, [=] { editor->showPage("advanced"); }, 0});
  steps_.push_back({always, [=] { shoot("setup-advanced"); }, 0});
  steps_.push_back({always, [=] { editor->showPage("basic"); }, 0});
  // 2. FLUX.1-dev planned on four simulated 16 GB cards (this machine need not have them).
  steps_.push_back({always,
                    [=] {
                      // The editor's own load: the tour's edits are not the user's, nothing to ask about.
                      if (!planConfig_.isEmpty() && editor->loadFile(planConfig_)) {
                        spec->setText("4x16GB");
                      } else {
                        editor->setValueText("model.preset", "flux-dev");
                        editor->setValueText("model.device", "cuda");
                        editor->setValueText("model.split_model_over_gpus", "true");
                        editor->setValueText("model.placement", "memory");
                        editor->setValueText("model.gpu_memory_limit_gb", "[16]");
                        editor->setValueText("train.dtype", "bf16");
                        spec->setText("4x16GB");
                      }
                      window_->replan();
                    },
                    0});
  steps_.push_back({always, [=] { shoot("plan-4x16GB"); }, 0});
  // 3. A config error on the demo: low_vram with the split on.
  steps_.push_back({always,
                    [=] {
                      spec->clear();
                      if (!originalPath_.isEmpty())
                        editor->loadFile(originalPath_);
                      else
                        editor->setYamlText(originalYaml_);
                      editor->setValueText("model.split_model_over_gpus", "true");
                      editor->setValueText("model.low_vram", "true");
                    },
                    0});
  steps_.push_back({always, [=] { shoot("config-error"); }, 0});
  // 3b. The dataset view on a small photo folder.
  auto* dataset = window_->datasetView();
  steps_.push_back({always,
                    [=] {
                      if (!originalPath_.isEmpty())
                        editor->loadFile(originalPath_);
                      else
                        editor->setYamlText(originalYaml_);
                      editor->setValueText("datasets[0].type", "images");
                      editor->setValueText("datasets[0].folder_path", writeTourPhotos());
                      editor->setValueText("datasets[0].trigger_word", "shp");
                      editor->setValueText("datasets[0].default_caption", "a shape");
                      editor->setValueText("datasets[0].resolution", "[32, 64]");
                      if (auto* side = window_->findChild<QTabWidget*>("setupSideTabs"))
                        side->setCurrentWidget(dataset);
                    },
                    0});
  steps_.push_back(
      {[=] { return dataset->scanCount() > 0 && !dataset->isScanning(); }, [=] { shoot("setup-dataset"); }, 30000});
  // 4. Back to the demo config; start a short run.
  steps_.push_back({always,
                    [=] {
                      if (!originalPath_.isEmpty())
                        editor->loadFile(originalPath_);
                      else
                        editor->setYamlText(originalYaml_);
                      window_->replan();
                    },
                    0});
  // Through the run queue: the demo, and a second config that waits (the queue is paused once the first starts).
  steps_.push_back({[=] { return !editor->hasErrors(); },
                    [=] {
                      if (auto* side = window_->findChild<QTabWidget*>("setupSideTabs")) side->setCurrentIndex(0);
                      window_->addToQueue();
                      editor->setValueText("job.name", "demo_shapes_lr1e-3");
                      editor->setValueText("train.lr", "0.001");
                      window_->addToQueue();
                      if (!originalPath_.isEmpty())
                        editor->loadFile(originalPath_);
                      else
                        editor->setYamlText(originalYaml_);
                      window_->setQueueRunning(true);
                    },
                    10000});
  steps_.push_back({[=] { return window_->bridge()->isActive(); }, [=] { window_->setQueueRunning(false); }, 60000});
  // 5. Mid-run: the live view once a sample exists.
  steps_.push_back(
      {[=] { return !window_->sampleBrowser()->samples().isEmpty() && window_->lossPlot()->plottedPointCount() >= 25; },
       [=] { shoot("run-live"); }, kRunTimeoutMs});
  // 6. After the run: loss, live map and samples.
  steps_.push_back({[=] { return !window_->bridge()->isActive(); }, [=] { tabs->setCurrentIndex(1); }, kRunTimeoutMs});
  steps_.push_back({always, [=] { shoot("run"); }, 0});
  steps_.push_back({always,
                    [=] {
                      tabs->setCurrentWidget(window_->sampleBrowser());
                      window_->sampleBrowser()->findChild<QTabWidget*>("sampleTabs")->setCurrentIndex(1);
                    },
                    0});
  steps_.push_back({always, [=] { shoot("samples-grid"); }, 0});
  steps_.push_back({always,
                    [=] {
                      const auto steps = window_->sampleBrowser()->steps();
                      if (!steps.isEmpty()) window_->sampleBrowser()->compare(steps.front(), steps.back());
                    },
                    0});
  steps_.push_back({always, [=] { shoot("samples-compare"); }, 0});
  // 7. The run view in the dark theme.
  steps_.push_back({always,
                    [=] {
                      window_->setTheme(ui::Theme::Dark);
                      tabs->setCurrentIndex(1);
                    },
                    0});
  steps_.push_back({always, [] {}, 0});  // one poll for the plots to restyle
  steps_.push_back({always, [=] { shoot("run-dark"); }, 0});
  steps_.push_back({always, [=] { window_->setTheme(ui::Theme::Light); }, 0});
  // A run still going (the wait above timed out on a slow machine) is stopped first: closing
  // the window during a run asks stop-or-keep, and nobody answers that here.
  steps_.push_back({always, [=] { window_->bridge()->stop(); }, 0});
  steps_.push_back({[=] { return !window_->bridge()->isActive(); }, [=] { QApplication::quit(); }, kRunTimeoutMs});
}

ScreenshotTour::~ScreenshotTour() { delete timer_; }

void ScreenshotTour::begin() {
  current_ = 0;
  waitedMs_ = 0;
  timer_->start();
}

void ScreenshotTour::next() {
  if (current_ >= steps_.size()) return;
  Step& s = steps_[current_];
  if (!s.ready()) {
    waitedMs_ += kPollMs;
    if (waitedMs_ < s.timeoutMs) return;
    std::fprintf(stderr, "screenshots: step %zu timed out, going on\n", current_);
  }
  waitedMs_ = 0;
  ++current_;
  s.act();
}

void ScreenshotTour::shoot(const QString& name) {
  QApplication::processEvents();
  const QString path = QDir(dir_).filePath(name + ".png");
  if (window_->grab().save(path))
    std::fprintf(stderr, "screenshots: %s\n", qPrintable(path));
  else
    std::fprintf(stderr, "screenshots: cannot write %s\n", qPrintable(path));
}

}  // namespace strata::app
