// `strata-train resume RUN_DIR`: continues a run from its latest checkpoint with
// the config it was started with; the loss curve, the LR schedule, the data
// order and the random draws continue as if it had never stopped. Exit codes
// as `run`. --nproc N (default: the run config's model.replicas), --events,
// --control-stdin and torchrun's variables as for `run` (DataParallel.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "CliChecks.h"
#include "DataParallel.h"
#include "EventStream.h"
#include "config/RunConfigYaml.h"
#include "events/EventBus.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

namespace strata::cli {

int runTrainerWithProgress(train::Trainer& trainer, events::EventBus& bus, EventOutput* output);  // CmdRun.cpp

namespace {

struct ResumeArgs {
  std::string runDir;
  int64_t stopAfter = 0;
  int nproc = 0;         // local data-parallel ranks; 0 = the run config's model.replicas
  StreamOptions stream;  // --events, --control-stdin (EventStream.h)
};

int runResume(const ResumeArgs& args) {
  std::vector<std::string> rank = {"resume", args.runDir};
  if (args.stopAfter > 0) rank.insert(rank.end(), {"--stop-after", std::to_string(args.stopAfter)});
  if (args.nproc > 1) return launchLocalRanks(args.nproc, rank, args.stream);
  if (args.nproc == 0) {
    // The run's model.replicas, as --nproc would (read only: the ranks open the folder themselves).
    int ranks = 1;
    try {
      ranks = localRanksToStart(0, train::openRunFolder(args.runDir, "resume from").config);
    } catch (const std::exception&) {
      // Said below, by the one process that then fails to open it.
    }
    if (ranks > 1) return launchLocalRanks(ranks, rank, args.stream);
  }
  EventOutput output(args.stream);  // before anything prints
  events::EventBus bus;
  std::unique_ptr<train::Trainer> trainer;
  try {
    train::TrainerOptions opts;
    opts.stopAfterStep = args.stopAfter;
    trainer = train::Trainer::resumeFrom(args.runDir, bus, opts);
    // A rank of a data-parallel run (torchrun's variables): the run's config, this rank's replica of its devices.
    config::RunConfig cfg = trainer->config();
    const std::string yaml = config::toYaml(cfg);
    if (const auto failed = joinDataParallel(cfg, yaml, opts, "strata-train resume")) return *failed;
    if (opts.collective) {
      opts.runDir = args.runDir;
      opts.resume = true;
      trainer = std::make_unique<train::Trainer>(cfg, bus, opts);
    }
  } catch (const std::exception& e) {
    std::cerr << "strata-train resume: " << e.what() << std::endl;
    return train::kExitBadInput;
  }
  return runTrainerWithProgress(*trainer, bus, &output);
}

}  // namespace

void addResumeCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ResumeArgs>();
  CLI::App* cmd = app.add_subcommand("resume", "Continue a run from its latest checkpoint");
  cmd->add_option("run_dir", args->runDir, "Run folder")->required();
  cmd->add_option("--stop-after", args->stopAfter, "Checkpoint and stop after this step")->check(stopAfterCheck());
  cmd->add_option("--nproc", args->nproc, "Continue data-parallel on N local ranks (any number: docs/data-parallel.md)")
      ->check(CLI::Range(1, 1024));  // default: the run config's model.replicas
  addStreamOptions(cmd, args->stream);
  cmd->footer("Exit codes: 0 finished, 1 failed during training, 2 bad input or preflight, 130 interrupted.");
  cmd->callback([args, &exitCode] { exitCode = runResume(*args); });
}

}  // namespace strata::cli
