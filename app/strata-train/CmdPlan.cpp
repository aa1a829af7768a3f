// `strata-train plan CONFIG [--devices 4x16GB | 24GB,16GB | cpu,2x80GB] [--nproc N] [--json]`:
// the placement the planner would make, per device, from the config and the
// model's shapes alone (no weights are read; a checkpoint's headers at most), on
// real devices or on simulated ones, so it works on a machine without a GPU.
// --nproc N: a data-parallel run of N local ranks (docs/data-parallel.md), each a
// replica of the config's devices on its own group of the node's cards: every
// replica's plan.
// train::prepareRun does the work, as it does for the trainer and the app.
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
#include "device/DeviceSelection.h"
#include "dist/ParallelDims.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

namespace strata::cli {

namespace {

struct PlanArgs {
  std::string configPath;
  std::string devices;  // empty: this machine's devices
  bool json = false;
  std::vector<std::string> sets;
  double otherGb = 0.0;  // more GB kept on the first device, beyond the parts the plan counts
  int nproc = 0;         // local data-parallel ranks: one plan per replica; 0 = the config's model.replicas
};

// The configs of a data-parallel run's local replicas on `inventory`: each rank's
// group of the node's cards as its model.gpu_ids (dist::parallelDimsOf, as the ranks
// take them). Throws ConfigError when the node has too few cards.
std::vector<config::RunConfig> replicaConfigs(const config::RunConfig& cfg, const device::Inventory& inventory,
                                              int nproc) {
  std::vector<int> nodeCards;
  for (const auto& d : inventory.devices)
    if (!d.isCpu()) nodeCards.push_back(d.index);
  return dist::replicaConfigs(cfg, nodeCards, nproc);
}

std::string cardsText(const config::RunConfig& replica) {
  if (replica.model.device == config::ComputeDevice::Cpu || replica.model.gpuIds.empty()) return "the CPU";
  std::string text;
  for (int c : replica.model.gpuIds) text += (text.empty() ? "cuda:" : ", cuda:") + std::to_string(c);
  return text;
}

// Every local replica's plan; exit 0 when all fit.
int planReplicas(const PlanArgs& args, int nproc, const config::RunConfig& cfg, const device::Inventory& inventory,
                 const train::PrepareOptions& po) {
  const auto replicas = replicaConfigs(cfg, inventory, nproc);
  bool allFit = true;
  nlohmann::json all = nlohmann::json::array();
  const size_t cards = replicas.front().model.gpuIds.size();
  if (!args.json)
    std::cout << "config   " << args.configPath << "\n"
              << "data parallel: " << nproc << " replicas x "
              << (cards == 0 ? std::string("the CPU") : std::to_string(cards) + (cards == 1 ? " card" : " cards"))
              << " (a global batch of " << nproc * std::max<int64_t>(cfg.train.batchSize, 1) << " per micro-batch), on "
              << inventory.source << "\n";
  for (size_t r = 0; r < replicas.size(); ++r) {
    const train::PreparedRun run = train::prepareRun(replicas[r], inventory, po);
    if (!run.ok()) {
      for (const auto& p : run.problems)
        if (p.isError()) std::cerr << "replica " << r << ": " << p.format() << "\n";
      return kExitBadInput;
    }
    allFit = allFit && run.plan.fits;
    if (args.json) {
      nlohmann::json j = placement::planToJson(run.plan);
      j["rank"] = r;
      j["cards"] = replicas[r].model.gpuIds;
      j["description"] = train::describePlan(run);
      all.push_back(j);
    } else {
      std::cout << "\nreplica " << r << " (local rank " << r << ") on " << cardsText(replicas[r]) << "\n"
                << placement::formatPlanTable(run.plan) << "\n"
                << train::describePlan(run) << "\n";
    }
  }
  if (args.json) {
    nlohmann::json j;
    j["config"] = args.configPath;
    j["replicas"] = all;
    j["fits"] = allFit;
    std::cout << j.dump(2) << "\n";
  }
  return allFit ? kExitOk : kExitFailed;
}

int runPlan(const PlanArgs& args) {
  config::LoadedConfig loaded = config::loadRunConfig(args.configPath);
  if (!args.sets.empty()) config::applyOverrides(loaded, args.sets);
  for (const auto& p : loaded.problems) {
    if (p.isError()) throw ConfigError(p.format());
  }
  const config::RunConfig& cfg = loaded.config;
  // Devices: simulated from --devices, else this machine's. A preview may be for
  // another machine: paths are not required to exist here.
  const device::Inventory inventory =
      args.devices.empty() ? device::thisMachine() : device::simulatedInventory(args.devices);
  train::PrepareOptions po;
  po.where = &loaded.where;
  po.preview = true;
  po.extraFirstDeviceBytes = static_cast<int64_t>(std::llround(args.otherGb * 1e9));
  // --nproc, else the config's model.replicas: the ranks `run` would start.
  const int nproc = args.nproc > 0 ? args.nproc : static_cast<int>(std::max<int64_t>(cfg.model.replicas, 1));
  if (nproc > 1) return planReplicas(args, nproc, cfg, inventory, po);
  const train::PreparedRun run = train::prepareRun(cfg, inventory, po);
  if (!run.ok()) {
    for (const auto& p : run.problems)
      if (p.isError()) std::cerr << p.format() << "\n";
    if (args.devices.empty() && inventory.devices.empty())
      std::cerr << "note: this machine has no CUDA device; simulate some with --devices, e.g. --devices 4x16GB\n";
    return kExitBadInput;
  }
  const placement::Plan& plan = run.plan;
  if (args.json) {
    nlohmann::json j = placement::planToJson(plan);
    j["config"] = args.configPath;
    j["model"] = run.modelSource;
    j["devices_source"] = run.devicesSource;
    j["tokens"] = run.tokens;
    j["lora_rank"] = cfg.network.linear;
    j["ema"] = cfg.train.ema.useEma;
    j["gradient_checkpointing"] = run.gradientCheckpointing;  // train.gradient_checkpointing: auto resolved
    if (!run.checkpointingNote.empty()) j["gradient_checkpointing_note"] = run.checkpointingNote;
    j["offload_optimizer_state"] = run.offloadOptimizerState;  // train.offload_optimizer_state: auto resolved
    if (!run.offloadNote.empty()) j["offload_optimizer_state_note"] = run.offloadNote;
    j["description"] = train::describePlan(run);  // the words of the text output and the app
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "config   " << args.configPath << "\n"
              << "model    " << run.modelSummary << "\n";  // the family's words
    std::cout << "training LoRA rank " << cfg.network.linear << ", EMA " << (cfg.train.ema.useEma ? "on" : "off")
              << ", " << run.tokens << " tokens x batch " << cfg.train.batchSize << ", checkpointing "
              << (run.gradientCheckpointing ? "on" : "off")
              << (cfg.train.gradientCheckpointingAuto
                      ? " (auto: " +
                            std::string(run.gradientCheckpointing ? "without it the plan does not fit"
                                                                  : "the plan fits without it") +
                            ")"
                      : std::string())
              << "\n";
    // Where the optimizer's moments wait between steps (train.offload_optimizer_state, auto resolved).
    const bool cpuAlone = run.devices.size() == 1 && run.devices.front().isCpu();
    std::cout << "optimizer " << config::enumName(cfg.train.optimizer) << ", moments "
              << (run.offloadOptimizerState ? "in host memory"
                  : cpuAlone                ? "in host memory (the run is on the cpu)"
                  : run.devices.size() > 1  ? "on the cards"
                                            : "on the card")
              << (cfg.train.offloadOptimizerStateAuto && !cpuAlone
                      ? " (auto: " +
                            std::string(run.offloadOptimizerState ? "on the card the plan does not fit"
                                        : cfg.train.optimizer == config::OptimizerType::AdamW
                                            ? "the plan fits with them there"
                                            : "only adamw's are staged") +
                            ")"
                      : std::string())
              << "\n"
              << "devices  " << run.devicesSource << "\n";
    // The table, then the plan in the words the app's plan view shows too.
    std::cout << "\n" << placement::formatPlanTable(plan) << "\n" << train::describePlan(run) << "\n";
    if (!plan.fits && !cfg.model.quantize) {
      // What would fit instead: the same run with the frozen blocks quantized.
      for (const auto& alt : train::quantizedAlternatives(cfg, inventory, po))
        std::cout << "\nwith model.quantize: true, model.qtype: " << alt.qtype << ": "
                  << (alt.plan.fits ? "fits\n" + placement::formatPlanTable(alt.plan) + "\n" + alt.plan.reason
                                    : "does not fit either: " + alt.plan.reason)
                  << "\n";
    }
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
                  "Simulate devices: 4x16GB, 24GB,16GB or cpu,2x80GB (default: this machine's GPUs)")
      ->check(nonEmptyCheck("a device list such as 4x16GB"));
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_option("--nproc", args->nproc,
                  "A data-parallel run of N local ranks: each replica's plan on its group of the node's cards "
                  "(docs/data-parallel.md; default: the config's model.replicas)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--set", args->sets, "Override a key: model.placement=memory");
  cmd->add_option("--other-gb", args->otherGb,
                  "More GB kept on the first device for the run, beyond the text encoders and VAE the plan counts")
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
