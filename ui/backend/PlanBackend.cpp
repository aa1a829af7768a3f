#include "ui/backend/PlanBackend.h"

#include <algorithm>
#include <map>

#include <QObject>
#include <QStringList>

#include "common/Error.h"
#include "config/RunConfig.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "dist/ParallelDims.h"
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

namespace {

// The devices a plan is made for: a simulated machine ("4x16GB"), or this one.
device::Inventory inventoryFor(const QString& deviceSpec) {
  const QString spec = deviceSpec.trimmed();
  return spec.isEmpty() ? device::thisMachine() : device::simulatedInventory(spec.toStdString());
}

std::vector<int> cardsOf(const device::Inventory& inventory) {
  std::vector<int> cards;
  for (const auto& d : inventory.devices)
    if (!d.isCpu()) cards.push_back(d.index);
  return cards;
}

// One replica's plan appended to `view`: its devices (named with `replica` when
// set), its fit and refusal. Throws the plan's first error.
train::PreparedRun appendPlan(PlacementView& view, const config::RunConfig& cfg, const device::Inventory& inventory,
                              const QString& replica) {
  train::PrepareOptions po;
  po.preview = true;  // the model and data may live elsewhere
  train::PreparedRun run = train::prepareRun(cfg, inventory, po);
  for (const config::Problem& p : run.problems)
    if (p.isError()) throw Error(p.key.empty() ? p.message : p.key + ": " + p.message);
  const placement::PlannerInput& input = run.input.input;
  const std::map<std::string, int>& adapterCount = run.input.adapters;
  const placement::Plan& plan = run.plan;
  view.fits = view.fits && plan.fits;
  if (view.refusal.isEmpty()) {
    // The words `strata-train run` refuses it with, and the same ways out.
    view.refusal = QString::fromStdString(train::planRefusal(run));
    if (!view.refusal.isEmpty())
      for (const std::string& way : train::planWayOut(cfg, inventory, run, po))
        view.wayOut << QString::fromStdString(way);
  }
  for (size_t i = 0; i < plan.devices.size(); ++i) {
    const placement::DevicePlan& dp = plan.devices[i];
    const device::DeviceInfo& info = run.devices[i];
    DeviceView d;
    d.label = QString::fromStdString(dp.device);
    d.name = QString::fromStdString(info.name);
    if (!replica.isEmpty()) d.name = QObject::tr("%1: %2").arg(replica, d.name);
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
  return run;
}

// The plan in the words `strata-train plan` prints, then what `auto` chose for
// checkpointing and the moments, and why, as the plan and the run header say it.
QString planSentence(const train::PreparedRun& run) {
  QString out = QString::fromStdString(train::describePlan(run));
  if (const std::string notes = train::autoChoiceNotes(run); !notes.empty())
    out += QStringLiteral(" ") + QString::fromStdString(notes) + QStringLiteral(".");
  return out;
}

QString cardsText(int n) { return n == 1 ? QObject::tr("1 card") : QObject::tr("%1 cards").arg(n); }

}  // namespace

PlacementView planPlacementView(const config::RunConfig& cfg, const QString& deviceSpec) {
  PlacementView view;
  view.planned = true;
  view.parts = backend::mapPartsOf(cfg.model.arch);  // the family's words, with or without a plan
  try {
    const device::Inventory inventory = inventoryFor(deviceSpec);
    const int replicas = static_cast<int>(std::max<int64_t>(cfg.model.replicas, 1));
    if (replicas == 1) {
      const train::PreparedRun run = appendPlan(view, cfg, inventory, QString());
      view.reason = planSentence(run);
    } else {
      // Each rank's replica on its own group of cards, as the ranks take them.
      const auto configs = dist::replicaConfigs(cfg, cardsOf(inventory), replicas);
      const bool onCards = !configs.front().model.gpuIds.empty() && cfg.model.device != config::ComputeDevice::Cpu;
      QString first;
      for (int r = 0; r < (onCards ? replicas : 1); ++r) {
        const train::PreparedRun run =
            appendPlan(view, configs[size_t(r)], inventory, onCards ? QObject::tr("replica %1").arg(r) : QString());
        if (r == 0) first = planSentence(run);
      }
      view.reason = (onCards ? QObject::tr("Data parallel: %1 replicas x %2. Each replica: %3")
                                   .arg(replicas)
                                   .arg(cardsText(int(configs.front().model.gpuIds.size())))
                             : QObject::tr("Data parallel: %1 replicas on the CPU. Each replica: %3").arg(replicas))
                        .arg(first);
    }
  } catch (const std::exception& e) {
    view.error = QObject::tr("No plan: %1").arg(QString::fromUtf8(e.what()));
    view.devices.clear();
  }
  return view;
}

ReplicaChoices replicaChoices(const config::RunConfig& cfg, const QString& deviceSpec) {
  ReplicaChoices out;
  device::Inventory inventory;
  try {
    inventory = inventoryFor(deviceSpec);
  } catch (const std::exception& e) {
    out.offReason = QObject::tr("No devices to share out: %1").arg(QString::fromUtf8(e.what()));
    return out;
  }
  const std::vector<int> cards = cardsOf(inventory);
  out.cards = int(cards.size());
  if (cfg.model.device == config::ComputeDevice::Cpu) {
    out.offReason = QObject::tr("The run trains on the CPU (model.device: cpu): replicas share out CUDA cards.");
    return out;
  }
  if (cards.empty()) {
    out.offReason = QObject::tr(
        "No CUDA card: replicas share out a machine's cards (a CPU run starts CPU ranks with "
        "strata-train run --nproc N).");
    return out;
  }
  if (cards.size() == 1) {
    out.offReason = QObject::tr("One card: nothing to share out (replicas need several cards).");
    return out;
  }
  const int n = out.cards;
  for (int r = 1; r <= n; ++r) {
    if (n % r != 0) continue;
    ReplicaChoice c;
    c.replicas = r;
    c.cardsPerReplica = n / r;
    c.text = QObject::tr("%1 as %2 of %3")
                 .arg(cardsText(n), r == 1 ? QObject::tr("1 replica") : QObject::tr("%1 replicas").arg(r),
                      cardsText(c.cardsPerReplica));
    // The replica's device set: one card, or a split the ranks share out evenly (no named cards).
    c.settings = {{"model.replicas", QString::number(r)},
                  {"model.split_model_over_gpus", c.cardsPerReplica > 1 ? "true" : "false"},
                  {"model.gpu_ids", "[]"}};
    config::RunConfig candidate = cfg;
    candidate.model.replicas = r;
    candidate.model.splitModelOverGpus = c.cardsPerReplica > 1;
    candidate.model.gpuIds.clear();
    // Replica 0's plan stands for each: the same shape on its own group of cards.
    PlacementView one;
    try {
      const auto configs = dist::replicaConfigs(candidate, cards, r);
      appendPlan(one, configs.front(), inventory, QString());
      if (!one.fits)
        c.reason = one.refusal.isEmpty()
                       ? QObject::tr("a replica does not fit its %1").arg(cardsText(c.cardsPerReplica))
                       : one.refusal;
    } catch (const std::exception& e) {
      c.reason = QString::fromUtf8(e.what());
    }
    c.enabled = c.reason.isEmpty();
    const bool split = cfg.model.splitModelOverGpus && (c.cardsPerReplica > 1);
    const bool single = !cfg.model.splitModelOverGpus && c.cardsPerReplica == 1;
    if (cfg.model.replicas == r && cfg.model.gpuIds.empty() && (split || single)) out.current = out.choices.size();
    out.choices << c;
  }
  return out;
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

ReplicaChoices replicaChoices(const ConfigDocument& config, const QString& deviceSpec) {
  return replicaChoices(config.config(), deviceSpec);
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
