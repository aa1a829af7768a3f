// `strata-train export RUN_DIR --format diffusers|kohya|comfy [--out DIR]`:
// writes the LoRA of a run's latest intact checkpoint (EMA weights when the run
// used EMA) in the given formats; a damaged newer one is passed over with a
// warning. Exit codes: 0 written, 1 export failed (a LoRA with NaN/Inf values, a
// write error), 2 bad input (not a run folder, no intact checkpoint).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "CliChecks.h"
#include "common/Error.h"
#include "config/RunConfig.h"
#include "train/Trainer.h"

namespace strata::cli {

namespace {

struct ExportArgs {
  std::string runDir;
  std::vector<std::string> formats;
  std::string outDir;
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
    const auto files = train::exportRun(args.runDir, formats, args.outDir, kVersion, &notes);
    for (const auto& n : notes) std::cerr << "strata-train export: warning: " << n << std::endl;
    for (const auto& p : files) std::cout << p.string() << "\n";
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
  CLI::App* cmd = app.add_subcommand("export", "Write a run's LoRA as diffusers, kohya or ComfyUI safetensors");
  cmd->add_option("run_dir", args->runDir, "Run folder")->required();
  cmd->add_option("--format", args->formats, "diffusers | kohya | comfy | peft (repeatable; default diffusers; a Llama run: peft)")
      ->delimiter(',');
  cmd->add_option("--out", args->outDir, "Output folder (default: RUN_DIR/exports)")
      ->check(nonEmptyCheck("a folder"));
  cmd->callback([args, &exitCode] { exitCode = runExport(*args); });
}

}  // namespace strata::cli
