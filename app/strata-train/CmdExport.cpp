// `strata-train export RUN_DIR [--step N] [--format diffusers|kohya|comfy|peft]
// [--out DIR] [--force | --keep-both]`: writes the LoRA of a run's checkpoint
// (the latest intact one, or that of step N; EMA weights when the run used EMA)
// in the given formats, named with the step; a damaged newer one is passed over
// with a warning. A file of the same name is not replaced without --force
// (--keep-both writes beside it under a new name and says which). Exit codes: 0
// written, 1 export failed (a LoRA with NaN/Inf values, a write error), 2 bad
// input (not a run folder, no intact checkpoint, no checkpoint of step N, a file
// in the way).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "CliChecks.h"
#include "common/Error.h"
#include "common/Interrupted.h"
#include "config/RunConfig.h"
#include "train/StopSignals.h"
#include "train/Trainer.h"

namespace strata::cli {

namespace {

struct ExportArgs {
  std::string runDir;
  std::vector<std::string> formats;
  std::string outDir;
  int64_t step = -1;  // -1: the latest intact checkpoint
  bool force = false;
  bool keepBoth = false;
};

int runExport(const ExportArgs& args) {
  std::vector<config::ExportFormat> formats;
  for (const auto& f : args.formats) {
    auto parsed = config::parseEnum<config::ExportFormat>(f);
    if (!parsed) {
      std::cerr << "strata-train export: unknown format '" << f << "' (diffusers, kohya, comfy, peft)" << std::endl;
      return train::kExitBadInput;
    }
    formats.push_back(*parsed);
  }
  if (formats.empty()) formats.push_back(config::ExportFormat::Diffusers);
  try {
    std::vector<std::string> notes;
    train::ExportOptions options;
    if (args.step >= 0) options.step = args.step;
    options.outDir = args.outDir;
    options.existing = args.force      ? train::ExistingExport::Overwrite
                       : args.keepBoth ? train::ExistingExport::NewName
                                       : train::ExistingExport::Refuse;
    // Ctrl-C stops before the next file: each file is whole or not there.
    train::StopOnSignals signals("strata-train", "stopping before the next file");
    options.stopRequested = [&signals] { return signals.signalReceived() != 0; };
    const auto files = train::exportRun(args.runDir, formats, options, &notes);
    for (const auto& n : notes) std::cerr << "strata-train export: " << n << std::endl;
    for (const auto& p : files) std::cout << p.string() << "\n";
  } catch (const Interrupted& e) {
    std::cerr << "strata-train export: " << e.what() << std::endl;
    return train::kExitInterrupted;
  } catch (const train::ExportExists& e) {
    std::cerr << "strata-train export: " << e.what()
              << "\n  --force replaces it, --keep-both writes beside it under a new name, --out DIR writes elsewhere"
              << std::endl;
    return train::kExitBadInput;
  } catch (const ConfigError& e) {
    std::cerr << "strata-train export: " << e.what() << std::endl;
    return train::kExitBadInput;
  } catch (const IoError& e) {
    std::cerr << "strata-train export: " << e.what() << std::endl;
    return train::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "strata-train export: " << e.what() << std::endl;
    return train::kExitFailed;
  }
  return train::kExitOk;
}

}  // namespace

void addExportCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd =
      app.add_subcommand("export", "Write a run checkpoint's LoRA as diffusers, kohya or ComfyUI safetensors, or peft");
  cmd->add_option("run_dir", args->runDir, "Run folder")->required();
  cmd->add_option("--format", args->formats,
                  "diffusers | kohya | comfy | peft (repeatable; default diffusers; a Llama run: peft)")
      ->delimiter(',');
  cmd->add_option("--out", args->outDir, "Output folder (default: RUN_DIR/exports)")->check(nonEmptyCheck("a folder"));
  cmd->add_option("--step", args->step, "Export the checkpoint of this step (default: the latest intact one)")
      ->check(CLI::NonNegativeNumber);
  auto* force = cmd->add_flag("--force", args->force, "Replace export files of the same name");
  cmd->add_flag("--keep-both", args->keepBoth, "Write beside export files of the same name, under a new name")
      ->excludes(force);
  cmd->callback([args, &exitCode] { exitCode = runExport(*args); });
}

}  // namespace strata::cli
