#pragma once
// Where the Run view's per-GPU utilisation and memory come from: an interface, so
// a test feeds scripted readings and the app reads NVML (core/device/GpuUsage).
// read() is called on the panel's sampling thread, never on the GUI thread.
#include <QString>
#include <QVector>
#include <memory>

namespace strata::ui {

struct GpuUsageView {
  QString label;  // "cuda:1" (or "gpu 1" when the CUDA ordinal is not known)
  QString name;   // "NVIDIA H200"
  int utilizationPercent = 0;
  qint64 memoryUsedBytes = 0;  // all processes
  qint64 memoryTotalBytes = 0;
};

struct GpuUsageReadingView {
  bool available = false;
  QString reason;  // why there are no figures
  QVector<GpuUsageView> gpus;
};

class GpuUsageSource {
 public:
  virtual ~GpuUsageSource() = default;
  virtual GpuUsageReadingView read() = 0;  // thread-safe
};

// NVML, loaded at run time; says why when the driver or a GPU is absent.
std::shared_ptr<GpuUsageSource> makeNvmlUsageSource();

}  // namespace strata::ui
