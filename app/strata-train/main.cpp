// strata-train: the headless front end of the Strata training core.
#include <CLI/CLI.hpp>

#include <csignal>
#include <exception>
#include <iostream>

#include "Commands.h"
#include "common/Version.h"
#include "families/Registration.h"

namespace {

// Every sub-command, in the order `--help` lists them.
constexpr strata::cli::AddCommandFn kCommands[] = {
    strata::cli::addValidateCommand, strata::cli::addPlanCommand,   strata::cli::addRunCommand,
    strata::cli::addResumeCommand,   strata::cli::addExportCommand, strata::cli::addBenchCommand,
    strata::cli::addSampleCommand,
};

}  // namespace

int main(int argc, char** argv) {
  strata::families::registerAll();
  // Past a file size limit (ulimit -f) a write fails with EFBIG and says so, like a
  // full disk, instead of SIGXFSZ ending the run without a word or a checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Strata: LoRA training for FLUX.1, FLUX.2 and Llama-family models, split over several GPUs (headless)",
               "strata-train"};
  app.set_version_flag("--version", std::string("strata-train ") + strata::kVersion);
  app.require_subcommand(1);
  app.fallthrough(false);

  int exitCode = strata::cli::kExitOk;
  for (const auto add : kCommands) add(app, exitCode);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive here as "successes"; everything else is bad input.
    const int rc = app.exit(e);
    return rc == 0 ? strata::cli::kExitOk : strata::cli::kExitBadInput;
  } catch (const std::exception& e) {
    // Commands turn their own errors into exit codes; this is the last guard so
    // that nothing ends in std::terminate with a trace.
    std::cerr << "strata-train: error: " << e.what() << "\n";
    return strata::cli::kExitFailed;
  } catch (...) {
    std::cerr << "strata-train: error: unknown failure\n";
    return strata::cli::kExitFailed;
  }
  return exitCode;
}
