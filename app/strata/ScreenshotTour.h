#pragma once
// --screenshot-dir: drives the real window through each view with real data
// (the loaded config, a planned split on simulated cards, a config error, a
// short training run, its samples) and saves QWidget::grab() of each as PNG.
#include <QString>
#include <functional>
#include <vector>

class QTimer;

namespace strata::ui {
class MainWindow;
}

namespace strata::app {

class ScreenshotTour {
 public:
  // `planConfig`: a config to show planned on simulated cards (e.g.
  // configs/flux-dev-split-4x16gb.yaml); empty = the loaded config made FLUX.1-dev sized.
  ScreenshotTour(ui::MainWindow* window, QString dir, QString planConfig = QString());
  ~ScreenshotTour();
  void begin();

 private:
  struct Step {
    std::function<bool()> ready;  // polled until true (or the timeout)
    std::function<void()> act;
    int timeoutMs;
  };
  void next();
  void shoot(const QString& name);

  ui::MainWindow* window_;
  QString dir_;
  QString originalYaml_;
  QString originalPath_;
  QString planConfig_;
  std::vector<Step> steps_;
  size_t current_ = 0;
  int waitedMs_ = 0;
  QTimer* timer_ = nullptr;
};

}  // namespace strata::app
