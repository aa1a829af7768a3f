#include "ui/backend/GpuUsageSource.h"

#include "device/GpuUsage.h"

namespace strata::ui {

namespace {

class NvmlUsageSource : public GpuUsageSource {
 public:
  GpuUsageReadingView read() override {
    const device::GpuUsageReading r = device::readGpuUsage();
    GpuUsageReadingView v;
    v.available = r.available;
    v.reason = QString::fromStdString(r.reason);
    for (const device::GpuUsage& g : r.gpus)
      v.gpus << GpuUsageView{QString::fromStdString(g.label()), QString::fromStdString(g.name), g.utilizationPercent,
                             g.memoryUsedBytes, g.memoryTotalBytes};
    return v;
  }
};

}  // namespace

std::shared_ptr<GpuUsageSource> makeNvmlUsageSource() { return std::make_shared<NvmlUsageSource>(); }

}  // namespace strata::ui
