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
  ScreenshotTour(ui::MainWindow* window, QString dir);
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
  std::vector<Step> steps_;
  size_t current_ = 0;
  int waitedMs_ = 0;
  QTimer* timer_ = nullptr;
};

}  // namespace strata::app
