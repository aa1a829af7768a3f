#include "ui/backend/PlanBackend.h"

#include <algorithm>
#include <map>

#include <QObject>
#include <QStringList>

#include "common/Error.h"
#include "config/RunConfig.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"
#include "ui/backend/ConfigDocument.h"
#include "ui/backend/FamilyBackend.h"

namespace strata::ui {

namespace {

BlockView blockViewOf(const placement::BlockCost& c, int adapters) {
  BlockView b;
  b.id = QString::fromStdString(c.id);
  b.kind = blockKindFromString(QString::fromStdString(c.kind));
  b.weightBytes = c.weightBytes;
  b.adapterBytes = c.adapterBytes + c.gradBytes;
  b.adapterCount = adapters;
  b.emaBytes = c.emaBytes;
  b.optimizerBytes = c.optimizerBytes;
  b.hostOptimizerBytes = c.hostBytes;
  b.activationBytes = c.activationBytes;
  return b;
}

}  // namespace

PlacementView planPlacementView(const config::RunConfig& cfg, const QString& deviceSpec) {
  PlacementView view;
  view.planned = true;
  view.parts = backend::mapPartsOf(cfg.model.arch);  // the family's words, with or without a plan
  try {
    const QString spec = deviceSpec.trimmed();
    const device::Inventory inventory =
        spec.isEmpty() ? device::thisMachine() : device::simulatedInventory(spec.toStdString());
    train::PrepareOptions po;
    po.preview = true;  // the model and data may live elsewhere
    const train::PreparedRun run = train::prepareRun(cfg, inventory, po);
    for (const config::Problem& p : run.problems)
      if (p.isError()) throw Error(p.key.empty() ? p.message : p.key + ": " + p.message);
    const placement::PlannerInput& input = run.input.input;
    const std::map<std::string, int>& adapterCount = run.input.adapters;
    const placement::Plan& plan = run.plan;

    view.reason = QString::fromStdString(train::describePlan(run));  // the words `strata-train plan` prints
    view.fits = plan.fits;
    // The words `strata-train run` refuses it with, and the same ways out.
    view.refusal = QString::fromStdString(train::planRefusal(run));
    if (!view.refusal.isEmpty())
      for (const std::string& way : train::planWayOut(cfg, inventory, run, po))
        view.wayOut << QString::fromStdString(way);
    for (size_t i = 0; i < plan.devices.size(); ++i) {
      const placement::DevicePlan& dp = plan.devices[i];
      const device::DeviceInfo& info = run.devices[i];
      DeviceView d;
      d.label = QString::fromStdString(dp.device);
      d.name = QString::fromStdString(info.name);
      d.simulated = info.simulated;
      d.totalBytes = info.totalBytes;
      d.capBytes = run.capBytes[i];
      d.plannedBytes = dp.totalBytes;
      d.budgetBytes = dp.budgetBytes;
      d.missingBytes = dp.missingBytes;
      d.hostBytes = dp.device == "cpu" ? 0 : dp.hostBytes;  // a cpu device's total counts it already
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
  // Sizes do not depend on the devices: plan on one simulated device (the cpu
  // for a CPU run, else one large GPU).
  config::RunConfig one = cfg;
  one.model.gpuIds.clear();
  one.model.splitModelOverGpus = false;
  one.model.placement = config::PlacementMode::ParamCount;
  one.model.gpuMemoryLimitGb.clear();
  one.model.memoryReserveGb = 0;
  QMap<QString, BlockView> out;
  const PlacementView v = planPlacementView(one, "cpu,1x100TB");
  for (const DeviceView& d : v.devices)
    for (const BlockView& b : d.blocks) out[b.id] = b;
  return out;
}

PlacementView planPlacementView(const ConfigDocument& config, const QString& deviceSpec) {
  return planPlacementView(config.config(), deviceSpec);
}

QMap<QString, BlockView> blockSizes(const ConfigDocument& config, const RunOverrides& overrides) {
  return blockSizes(config.runConfig(overrides));
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
