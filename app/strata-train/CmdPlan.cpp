// `strata-train plan CONFIG [--devices 4x16GB | 24GB,16GB | cpu,2x80GB] [--json]`:
// the placement the planner would make, per device, from the config and the
// model's shapes alone (no weights are read; a checkpoint's headers at most), on
// real devices or on simulated ones, so it works on a machine without a GPU.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "Commands.h"
#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "lora/LoraTargets.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"

namespace strata::cli {

namespace {

struct PlanArgs {
  std::string configPath;
  std::string devices;  // empty: this machine's GPUs (model.gpu_ids)
  bool json = false;
  std::vector<std::string> sets;
  double otherGb = 0.0;  // text encoders / VAE resident on the first device (memory mode)
};

flux::FluxConfig fluxConfigFor(const config::ModelConfig& m, std::string& source) {
  flux::FluxConfig c;
  if (m.preset == config::ModelPreset::Tiny) {
    c = flux::FluxConfig::tiny();
    source = "preset tiny";
  } else if (m.preset == config::ModelPreset::FluxDev || m.randomWeights || m.nameOrPath.empty()) {
    c = flux::FluxConfig::fluxDev();
    source = "preset flux-dev";
  } else if (std::filesystem::exists(m.nameOrPath)) {
    c = flux::FluxConfig::fromCheckpoint(m.nameOrPath, m.axesDimsRope);
    source = "shapes of " + m.nameOrPath + " (headers only)";
  } else {
    c = flux::FluxConfig::fluxDev();
    source = "preset flux-dev (" + m.nameOrPath + " not found here)";
  }
  if (m.numLayers) c.numLayers = *m.numLayers;
  if (m.numSingleLayers) c.numSingleLayers = *m.numSingleLayers;
  if (m.numAttentionHeads) c.numAttentionHeads = *m.numAttentionHeads;
  if (m.attentionHeadDim) c.attentionHeadDim = *m.attentionHeadDim;
  if (m.inChannels) c.inChannels = *m.inChannels;
  if (m.jointAttentionDim) c.jointAttentionDim = *m.jointAttentionDim;
  if (m.pooledProjectionDim) c.pooledProjectionDim = *m.pooledProjectionDim;
  if (!m.axesDimsRope.empty()) c.axesDimsRope = m.axesDimsRope;
  if (m.guidanceEmbeds) c.guidanceEmbeds = *m.guidanceEmbeds;
  c.validate();
  return c;
}

placement::UnitShape unitFrom(const flux::FluxBlockParams& b, const lora::LoraTargets& targets,
                              bool isBlock) {
  placement::UnitShape u;
  u.id = b.id;
  u.kind = b.kind;
  u.paramCount = b.paramCount;
  u.isBlock = isBlock;
  for (const auto& l : b.linears) {
    if (targets.matches(l.path)) u.loraLinears.push_back(placement::LinearShape{l.inFeatures, l.outFeatures});
  }
  return u;
}

int runPlan(const PlanArgs& args) {
  config::LoadedConfig loaded = config::loadRunConfig(args.configPath);
  if (!args.sets.empty()) config::applyOverrides(loaded, args.sets);
  for (const auto& p : loaded.problems) {
    if (p.isError()) throw ConfigError(p.format());
  }
  const config::RunConfig& cfg = loaded.config;
  std::string modelSource;
  const flux::FluxConfig fc = fluxConfigFor(cfg.model, modelSource);
  const flux::FluxParamPlan pp = flux::fluxParamPlan(fc);
  const lora::LoraTargets targets = cfg.network.targetModules.empty()
                                        ? lora::LoraTargets::fluxDefault()
                                        : lora::LoraTargets(cfg.network.targetModules);

  placement::CostOptions o;
  const bool fp32 = cfg.train.dtype == config::DType::FP32;
  o.weightElementBytes = cfg.model.quantize ? 1 : (fp32 ? 4 : 2);
  o.activationElementBytes = fp32 ? 4 : 2;
  o.loraRank = cfg.network.linear;
  o.ema = cfg.train.ema.useEma;
  o.batchSize = cfg.train.batchSize;
  int64_t resolution = 512;
  for (const auto& d : cfg.datasets) {
    for (int64_t r : d.resolution) resolution = std::max(resolution, r);
  }
  const int64_t imageTokens = (resolution / 16) * (resolution / 16);  // 8x VAE, 2x2 packing
  const int64_t textTokens = 512;                                      // T5 sequence (dev)
  o.tokens = imageTokens + textTokens;
  o.hiddenSize = fc.hiddenSize();
  o.gradientCheckpointing = cfg.train.gradientCheckpointing;

  std::vector<placement::UnitShape> blocks;
  for (const auto& b : pp.blocks) blocks.push_back(unitFrom(b, targets, true));
  placement::PlannerInput in = placement::estimateInput(unitFrom(pp.stem, targets, false), blocks,
                                                        unitFrom(pp.head, targets, false), o);
  in.mode = cfg.model.placement == config::PlacementMode::Memory ? placement::PlanMode::Memory
                                                                  : placement::PlanMode::ParamCount;
  in.otherModuleParamCountScale = cfg.model.splitModelOtherModuleParamCountScale;
  in.otherModuleBytes = static_cast<int64_t>(std::llround(args.otherGb * 1e9));

  // Devices: simulated from --devices, else this machine's (model.gpu_ids).
  std::vector<device::DeviceInfo> devices;
  std::vector<int64_t> freeBytes;
  std::string deviceSource;
  if (!args.devices.empty()) {
    devices = device::parseDeviceSpec(args.devices);
    deviceSource = "simulated (--devices " + args.devices + ")";
  } else {
    const auto all = device::listDevices();
    if (all.empty()) {
      throw ConfigError("plan: this machine has no CUDA device; simulate some with --devices, e.g. --devices 4x16GB");
    }
    if (cfg.model.gpuIds.empty()) {
      devices = all;
    } else {
      for (int id : cfg.model.gpuIds) {
        if (id < 0 || id >= static_cast<int>(all.size())) {
          throw ConfigError("model.gpu_ids: GPU " + std::to_string(id) + " does not exist (this machine has " +
                            std::to_string(all.size()) + ")");
        }
        devices.push_back(all[static_cast<size_t>(id)]);
      }
    }
    for (const auto& d : devices) freeBytes.push_back(device::memoryFigures(d.index).freeBytes);
    deviceSource = "this machine";
  }
  if (!cfg.model.splitModelOverGpus && devices.size() > 1) devices.resize(1);
  in.devices = placement::makeBudgets(devices, cfg.model.gpuMemoryLimitGb, cfg.model.memoryReserveGb, freeBytes);

  const placement::Plan plan = placement::planPlacement(in);
  if (args.json) {
    nlohmann::json j = placement::planToJson(plan);
    j["config"] = args.configPath;
    j["model"] = modelSource;
    j["devices_source"] = deviceSource;
    j["tokens"] = o.tokens;
    j["lora_rank"] = o.loraRank;
    j["ema"] = o.ema;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "config   " << args.configPath << "\n"
              << "model    FLUX " << modelSource << ", " << fc.numLayers << " double + "
              << fc.numSingleLayers << " single blocks, "
              << std::llround(static_cast<double>(pp.totalParams()) / 1e8) / 10.0 << "B parameters\n"
              << "training LoRA rank " << o.loraRank << ", EMA " << (o.ema ? "on" : "off") << ", "
              << o.tokens << " tokens x batch " << o.batchSize << ", checkpointing "
              << (o.gradientCheckpointing ? "on" : "off") << "\n"
              << "devices  " << deviceSource;
    if (!cfg.model.splitModelOverGpus) std::cout << " (split_model_over_gpus is off: first device only)";
    std::cout << "\n";
    if (in.otherModuleBytes == 0) {
      std::cout << "         text encoders and VAE not counted (embeddings cached; --other-gb adds them)\n";
    }
    std::cout << "\n" << placement::formatPlan(plan);
  }
  return plan.fits ? kExitOk : kExitFailed;
}

}  // namespace

// Exit code: 0 when the plan fits, 1 when it does not (the plan is printed with
// what is missing where), 2 on bad input.
void addPlanCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Show the placement per device, without loading weights");
  cmd->add_option("config", args->configPath, "Run config (YAML)")->required();
  cmd->add_option("--devices", args->devices,
                  "Simulate devices: 4x16GB, 24GB,16GB or cpu,2x80GB (default: this machine's GPUs)");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_option("--set", args->sets, "Override a key: model.placement=memory");
  cmd->add_option("--other-gb", args->otherGb, "GB of text encoders / VAE kept on the first device");
  cmd->callback([args, &exitCode] {
    try {
      exitCode = runPlan(*args);
    } catch (const Error& e) {  // config, I/O, shapes, devices: bad input, one line
      std::cerr << "strata-train plan: error: " << e.what() << "\n";
      exitCode = kExitBadInput;
    }
  });
}

}  // namespace strata::cli
