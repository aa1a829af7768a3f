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

#include "CliChecks.h"
#include "Commands.h"
#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

namespace strata::cli {

namespace {

struct PlanArgs {
  std::string configPath;
  std::string devices;  // empty: this machine's GPUs (model.gpu_ids)
  bool json = false;
  std::vector<std::string> sets;
  double otherGb = 0.0;  // text encoders / VAE resident on the first device (memory mode)
};

int runPlan(const PlanArgs& args) {
  config::LoadedConfig loaded = config::loadRunConfig(args.configPath);
  if (!args.sets.empty()) config::applyOverrides(loaded, args.sets);
  for (const auto& p : loaded.problems) {
    if (p.isError()) throw ConfigError(p.format());
  }
  const config::RunConfig& cfg = loaded.config;
  std::string modelSource;
  const flux::FluxConfig fc = train::planFluxConfig(cfg.model, &modelSource);
  const flux::FluxParamPlan pp = flux::fluxParamPlan(fc);
  const int64_t tokens = train::planTokens(cfg, fc);
  placement::PlannerInput in = train::runPlanInput(cfg, fc, tokens).input;
  in.otherModuleBytes = static_cast<int64_t>(std::llround(args.otherGb * 1e9));

  // Devices: simulated from --devices, else this machine's (model.gpu_ids).
  std::vector<device::DeviceInfo> devices;
  std::vector<int64_t> freeBytes;
  std::string deviceSource;
  if (!args.devices.empty()) {
    devices = device::parseDeviceSpec(args.devices);
    deviceSource = "simulated (--devices " + args.devices + ")";
  } else if (cfg.model.device == config::ComputeDevice::Cpu ||
             (cfg.model.device == config::ComputeDevice::Auto && device::listDevices().empty())) {
    // Where the trainer would run it: on the CPU (model.device: cpu, or auto here without a GPU).
    devices = {device::cpuDevice()};
    deviceSource = cfg.model.device == config::ComputeDevice::Cpu ? "this machine's CPU (model.device: cpu)"
                                                                   : "this machine's CPU (no CUDA device here)";
  } else {
    const auto all = device::listDevices();
    if (all.empty()) {
      throw ConfigError("plan: model.device is cuda but this machine has no CUDA device; simulate some with "
                        "--devices, e.g. --devices 4x16GB");
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
    j["tokens"] = tokens;
    j["lora_rank"] = cfg.network.linear;
    j["ema"] = cfg.train.ema.useEma;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "config   " << args.configPath << "\n"
              << "model    FLUX " << modelSource << ", " << fc.numLayers << " double + "
              << fc.numSingleLayers << " single blocks, "
              << std::llround(static_cast<double>(pp.totalParams()) / 1e8) / 10.0 << "B parameters\n"
              << "training LoRA rank " << cfg.network.linear << ", EMA " << (cfg.train.ema.useEma ? "on" : "off") << ", "
              << tokens << " tokens x batch " << cfg.train.batchSize << ", checkpointing "
              << (cfg.train.gradientCheckpointing ? "on" : "off") << "\n"
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
  cmd->add_option("--other-gb", args->otherGb, "GB of text encoders / VAE kept on the first device")
      ->check(gigabytesCheck());
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
