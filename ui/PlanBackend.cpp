#include "ui/PlanBackend.h"

#include <algorithm>
#include <map>

#include <QObject>
#include <QStringList>

#include "config/RunConfig.h"
#include "device/DeviceInventory.h"
#include "lora/LoraTargets.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"

namespace strata::ui {

namespace {

flux::FluxConfig fluxConfigOf(const config::ModelConfig& m) {
  flux::FluxConfig fc;
  switch (m.preset) {
    case config::ModelPreset::Tiny: fc = flux::FluxConfig::tiny(); break;
    case config::ModelPreset::FluxDev: fc = flux::FluxConfig::fluxDev(); break;
    case config::ModelPreset::Auto:
      // Detect from the checkpoint's header (no tensor data); random weights are flux-dev sized.
      fc = (!m.randomWeights && !m.nameOrPath.empty()) ? flux::FluxConfig::fromCheckpoint(m.nameOrPath)
                                                        : flux::FluxConfig::fluxDev();
      break;
  }
  if (m.numLayers) fc.numLayers = *m.numLayers;
  if (m.numSingleLayers) fc.numSingleLayers = *m.numSingleLayers;
  if (m.numAttentionHeads) fc.numAttentionHeads = *m.numAttentionHeads;
  if (m.attentionHeadDim) fc.attentionHeadDim = *m.attentionHeadDim;
  if (m.inChannels) fc.inChannels = fc.outChannels = *m.inChannels;
  if (m.jointAttentionDim) fc.jointAttentionDim = *m.jointAttentionDim;
  if (m.pooledProjectionDim) fc.pooledProjectionDim = *m.pooledProjectionDim;
  if (!m.axesDimsRope.empty()) fc.axesDimsRope = m.axesDimsRope;
  if (m.guidanceEmbeds) fc.guidanceEmbeds = *m.guidanceEmbeds;
  fc.validate();
  return fc;
}

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

int64_t dtypeBytes(config::DType t) { return t == config::DType::FP32 ? 4 : 2; }

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
    const flux::FluxConfig fc = fluxConfigOf(cfg.model);
    const flux::FluxParamPlan params = flux::fluxParamPlan(fc);
    const lora::LoraTargets targets = cfg.network.targetModules.empty()
                                          ? lora::LoraTargets::fluxDefault()
                                          : lora::LoraTargets(cfg.network.targetModules);
    std::map<std::string, int> adapterCount;
    auto shapeOf = [&](const flux::FluxBlockParams& b) {
      placement::UnitShape u;
      u.id = b.id;
      u.kind = b.kind;
      u.paramCount = b.paramCount;
      u.isBlock = b.kind != "stem" && b.kind != "head";
      for (const auto& l : b.linears)
        if (targets.matches(l.path)) u.loraLinears.push_back({l.inFeatures, l.outFeatures});
      adapterCount[b.id] = int(u.loraLinears.size());
      return u;
    };
    std::vector<placement::UnitShape> blocks;
    for (const auto& b : params.blocks) blocks.push_back(shapeOf(b));

    placement::CostOptions opt;
    opt.weightElementBytes = cfg.model.quantize ? 1 : dtypeBytes(cfg.train.dtype);
    opt.loraRank = cfg.network.linear;
    opt.ema = cfg.train.ema.useEma;
    opt.batchSize = cfg.train.batchSize;
    int64_t resolution = 512;
    for (const auto& d : cfg.datasets)
      for (int64_t r : d.resolution) resolution = std::max(resolution, r);
    // Image tokens after the VAE (8x) and 2x2 packing, plus T5's 512 text tokens.
    opt.tokens = (resolution / 16) * (resolution / 16) + 512;
    opt.hiddenSize = fc.hiddenSize();
    opt.activationElementBytes = dtypeBytes(cfg.train.dtype);
    opt.gradientCheckpointing = cfg.train.gradientCheckpointing;
    placement::PlannerInput input = placement::estimateInput(shapeOf(params.stem), blocks, shapeOf(params.head), opt);
    input.mode = cfg.model.placement == config::PlacementMode::Memory ? placement::PlanMode::Memory
                                                                      : placement::PlanMode::ParamCount;
    input.otherModuleParamCountScale = cfg.model.splitModelOtherModuleParamCountScale;

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
      if (dp.hasStem) d.blocks << blockViewOf(input.stem, adapterCount[input.stem.id]);
      for (size_t b = dp.firstBlock; b < dp.endBlock; ++b)
        d.blocks << blockViewOf(input.blocks[b], adapterCount[input.blocks[b].id]);
      if (dp.hasHead) d.blocks << blockViewOf(input.head, adapterCount[input.head.id]);
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
