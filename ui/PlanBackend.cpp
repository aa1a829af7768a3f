#include "ui/PlanBackend.h"

#include <algorithm>
#include <map>

#include <QObject>
#include <QStringList>

#include "config/RunConfig.h"
#include "device/DeviceInventory.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

namespace strata::ui {

namespace {

// The devices the run would use: the spec's (simulated) or this machine's, then
// gpu_ids and the split setting applied as the trainer applies them.
std::vector<device::DeviceInfo> devicesFor(const config::ModelConfig& m, const QString& spec) {
  std::vector<device::DeviceInfo> all;
  if (!spec.trimmed().isEmpty()) {
    all = device::parseDeviceSpec(spec.trimmed().toStdString());
  } else {
    if (m.device != config::ComputeDevice::Cpu) all = device::listDevices();
    if (all.empty()) all.push_back(device::cpuDevice());
  }
  std::vector<device::DeviceInfo> gpus, out;
  for (const auto& d : all)
    if (!d.isCpu()) gpus.push_back(d);
  if (m.device == config::ComputeDevice::Cpu || gpus.empty()) {
    for (const auto& d : all)
      if (d.isCpu()) return {d};
    return {device::cpuDevice()};
  }
  if (!m.gpuIds.empty()) {
    for (int id : m.gpuIds)
      for (const auto& d : gpus)
        if (d.index == id) out.push_back(d);
  } else {
    out = gpus;
  }
  if (out.empty()) out = gpus;  // the validator names the bad ids
  if (!m.splitModelOverGpus) out.resize(1);
  // A spec may list the cpu as a placement target too ("cpu,2x16GB").
  if (m.splitModelOverGpus && !spec.trimmed().isEmpty())
    for (const auto& d : all)
      if (d.isCpu()) out.push_back(d);
  return out;
}

BlockView blockViewOf(const placement::BlockCost& c, int adapters) {
  BlockView b;
  b.id = QString::fromStdString(c.id);
  b.kind = blockKindFromString(QString::fromStdString(c.kind));
  b.weightBytes = c.weightBytes;
  b.adapterBytes = c.adapterBytes + c.gradBytes;
  b.adapterCount = adapters;
  b.emaBytes = c.emaBytes;
  b.optimizerBytes = c.optimizerBytes;
  b.activationBytes = c.activationBytes;
  return b;
}

}  // namespace

PlacementView planPlacementView(const config::RunConfig& cfg, const QString& deviceSpec) {
  PlacementView view;
  view.planned = true;
  try {
    const flux::FluxConfig fc = train::planFluxConfig(cfg.model);
    const int64_t tokens = train::planTokens(cfg, fc);
    const train::RunPlanInput run = train::runPlanInput(cfg, fc, tokens);
    placement::PlannerInput input = run.input;
    const std::map<std::string, int>& adapterCount = run.adapters;

    const std::vector<device::DeviceInfo> devices = devicesFor(cfg.model, deviceSpec);
    input.devices = placement::makeBudgets(devices, cfg.model.gpuMemoryLimitGb, cfg.model.memoryReserveGb);
    const placement::Plan plan = placement::planPlacement(input);

    view.reason = QString::fromStdString(plan.reason);
    view.fits = plan.fits;
    size_t gpu = 0;
    for (size_t i = 0; i < plan.devices.size(); ++i) {
      const placement::DevicePlan& dp = plan.devices[i];
      const device::DeviceInfo& info = devices[i];
      DeviceView d;
      d.label = QString::fromStdString(dp.device);
      d.name = QString::fromStdString(info.name);
      d.simulated = info.simulated;
      d.totalBytes = info.totalBytes;
      if (!info.isCpu() && !cfg.model.gpuMemoryLimitGb.empty()) {
        const auto& caps = cfg.model.gpuMemoryLimitGb;
        d.capBytes = int64_t(1e9 * (caps.size() == 1 ? caps[0] : caps[std::min(gpu, caps.size() - 1)]));
      }
      if (!info.isCpu()) ++gpu;
      d.plannedBytes = dp.totalBytes;
      d.budgetBytes = dp.budgetBytes;
      d.missingBytes = dp.missingBytes;
      if (dp.hasStem) d.blocks << blockViewOf(input.stem, adapterCount.at(input.stem.id));
      for (size_t b = dp.firstBlock; b < dp.endBlock; ++b)
        d.blocks << blockViewOf(input.blocks[b], adapterCount.at(input.blocks[b].id));
      if (dp.hasHead) d.blocks << blockViewOf(input.head, adapterCount.at(input.head.id));
      view.devices << d;
    }
  } catch (const std::exception& e) {
    view.error = QObject::tr("No plan: %1").arg(QString::fromUtf8(e.what()));
    view.devices.clear();
  }
  return view;
}

QMap<QString, BlockView> blockSizes(const config::RunConfig& cfg) {
  // Sizes do not depend on the devices: plan on the host alone.
  config::RunConfig one = cfg;
  one.model.device = config::ComputeDevice::Cpu;
  one.model.splitModelOverGpus = false;
  one.model.placement = config::PlacementMode::ParamCount;
  one.model.gpuMemoryLimitGb.clear();
  one.model.memoryReserveGb = 0;
  QMap<QString, BlockView> out;
  const PlacementView v = planPlacementView(one, "cpu");
  for (const DeviceView& d : v.devices)
    for (const BlockView& b : d.blocks) out[b.id] = b;
  return out;
}

void applyBlockSizes(PlacementView& live, const QMap<QString, BlockView>& sizes) {
  for (DeviceView& d : live.devices)
    for (BlockView& b : d.blocks) {
      if (b.measured) continue;  // the run's own figures win over a re-plan
      auto it = sizes.find(b.id);
      if (it == sizes.end()) continue;
      const BlockKind kind = b.kind;
      b = *it;
      b.kind = kind;
      b.activationBytes = 0;  // planned figure only
    }
}

QString deviceSummary() {
  QStringList parts;
  try {
    for (const auto& d : device::listDevices())
      parts << QString("%1 %2 %3")
                   .arg(QString::fromStdString(d.label()), QString::fromStdString(d.name),
                        QString::fromStdString(device::formatBytes(d.totalBytes)));
    const auto cpu = device::cpuDevice();
    parts << QString("cpu %1").arg(QString::fromStdString(device::formatBytes(cpu.totalBytes)));
  } catch (const std::exception& e) {
    parts << QString::fromUtf8(e.what());
  }
  if (parts.size() == 1) parts.front() += QObject::tr(" (no CUDA device)");
  return parts.join(QStringLiteral("  |  "));
}

}  // namespace strata::ui
