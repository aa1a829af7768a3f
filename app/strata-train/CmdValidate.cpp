// `strata-train validate CONFIG [--set key=value ...] [--devices SPEC]`: checks a
// run config (Strata's or an ai-toolkit job file) and prints every problem like a
// compiler: "file:line:col: error: key: message", then a hint line.
// The datasets are read too (a jsonl file or image folder that yields no sample,
// a missing tokenizer), as the app's problem list does.
// Exit codes: 0 no errors (warnings allowed), 2 errors or unreadable input.
// LibTorch (the family registry) before the rest.
#include "train/ModelFamily.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CliChecks.h"
#include "Commands.h"
#include "common/Error.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "device/DeviceInventory.h"
#include "dist/ParallelDims.h"

namespace strata::cli {
namespace {

struct ValidateArgs {
  std::string configPath;
  std::vector<std::string> overrides;
  std::string devicesSpec;
  bool noDeviceCheck = false;
  bool noPathCheck = false;
  bool quiet = false;
};

int runValidate(const ValidateArgs& args) {
  config::LoadedConfig loaded;
  try {
    loaded = config::loadRunConfig(args.configPath);
  } catch (const Error& e) {
    std::cerr << "strata-train: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  config::applyOverrides(loaded, args.overrides);

  // Devices: a planned machine (--devices), else this machine's GPUs when it has
  // any. Without a GPU here, a config for GPUs is not judged against the CPU.
  std::optional<std::vector<device::DeviceInfo>> devices;
  std::string deviceNote;
  if (!args.noDeviceCheck) {
    try {
      if (!args.devicesSpec.empty()) {
        devices = device::parseDeviceSpec(args.devicesSpec);
      } else {
        std::vector<device::DeviceInfo> here = device::listDevices();
        if (!here.empty())
          devices = std::move(here);
        else
          deviceNote =
              "note: no CUDA device on this machine: gpu ids and bf16 support not checked "
              "(--devices 4x16GB checks against a planned machine)";
      }
    } catch (const Error& e) {
      std::cerr << "strata-train: error: --devices: " << e.what() << "\n";
      return kExitBadInput;
    }
  }

  std::vector<config::Problem> problems = config::validateLoaded(loaded, devices, !args.noPathCheck);
  // What the datasets and the tokenizer give (a file that yields no sample), as the app lists it.
  if (loaded.readable && !args.noPathCheck) {
    std::vector<config::Problem> data = train::dataProblems(loaded.config, &loaded.where);
    problems.insert(problems.end(), data.begin(), data.end());
  }
  // model.replicas on known cards: each rank's group of them, refused as the ranks would refuse it.
  if (loaded.readable && devices && loaded.config.model.replicas > 1 &&
      loaded.config.model.device != config::ComputeDevice::Cpu) {
    std::vector<int> cards;
    for (const auto& d : *devices)
      if (!d.isCpu()) cards.push_back(d.index);
    if (!cards.empty()) {
      try {
        dist::replicaConfigs(loaded.config, cards, static_cast<int>(loaded.config.model.replicas));
      } catch (const Error& e) {
        problems.push_back(config::problemAt(config::Severity::Error, "model.replicas", e.what(),
                                             "fewer replicas, or fewer cards a replica", &loaded.where));
      }
    }
  }
  size_t errors = 0;
  size_t warnings = 0;
  for (const auto& p : problems) {
    if (p.isError())
      ++errors;
    else
      ++warnings;
    if (p.isError() || !args.quiet) std::cerr << p.format() << "\n";
  }
  // Data parallel: how many processes `run` starts (plan shows each replica's cards).
  if (!args.quiet && loaded.readable && loaded.config.model.replicas > 1)
    std::cerr << "note: model.replicas: " << loaded.config.model.replicas
              << " local ranks, each a replica of the devices above (data parallel; `strata-train plan` shows each "
                 "replica's cards)\n";
  // The note matters only for a readable config that would train on a GPU.
  if (!deviceNote.empty() && !args.quiet && loaded.readable && loaded.config.model.device != config::ComputeDevice::Cpu)
    std::cerr << deviceNote << "\n";
  std::cout << args.configPath << ": " << (errors ? "invalid" : "ok") << " (" << errors
            << (errors == 1 ? " error, " : " errors, ") << warnings << (warnings == 1 ? " warning" : " warnings")
            << (loaded.fromAiToolkit ? ", imported from an ai-toolkit job" : "") << ")\n";
  return errors ? kExitBadInput : kExitOk;
}

}  // namespace

void addValidateCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand("validate", "Check a run config and list every problem with its line");
  cmd->add_option("config", args->configPath, "Run config (YAML; ai-toolkit job files are imported)")->required();
  cmd->add_option("--set", args->overrides, "Override a key first: --set train.lr=2e-4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->take_first()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--devices", args->devicesSpec,
                  "Check against planned GPUs instead of this machine's, e.g. 4x16GB or 24GB,16GB")
      ->check(nonEmptyCheck("a device list such as 4x16GB"));
  cmd->add_flag("--no-device-check", args->noDeviceCheck, "Skip the gpu-id and bf16 checks");
  cmd->add_flag("--no-path-check", args->noPathCheck, "Do not require model and dataset paths to exist");
  cmd->add_flag("-q,--quiet", args->quiet, "Print errors only");
  cmd->callback([args, &exitCode] { exitCode = runValidate(*args); });
}

}  // namespace strata::cli
