// `strata-train run CONFIG [--set key=value ...] [--run-dir DIR] [--stop-after N] [--devices SPEC]
// [--nproc N] [--events jsonl] [--control-stdin]`:
// trains a LoRA from a run config, printing a progress bar (step/total, loss,
// s/it, ETA) on a terminal and plain lines otherwise. Ctrl-C, SIGTERM and SIGHUP
// save a checkpoint and stop (a second one ends the process at once). --devices
// runs the preflight alone on simulated devices (is the run refused there?).
// --nproc N trains data-parallel on N local ranks (DataParallel.h; without it,
// the config's model.replicas); a process that torchrun started (WORLD_SIZE
// above 1) joins its run as one rank.
// --events / --control-stdin: the app's child process (EventStream.h).
//
// Exit codes: 0 finished; 1 failed during training (NaN/Inf loss, I/O, out of
// memory; the last good checkpoint is kept); 2 bad command line, config or
// preflight problem (nothing trained); 130 stopped (Ctrl-C, SIGTERM, SIGHUP,
// --stop-after) with a checkpoint of that step written.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "common/Error.h"
#include "common/Text.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "device/DeviceInventory.h"
#include "device/DeviceSelection.h"
#include "events/EventBus.h"
#include "CliChecks.h"
#include "Commands.h"
#include "DataParallel.h"
#include "EventStream.h"
#include "train/StopSignals.h"
#include "train/Trainer.h"

namespace strata::cli {

namespace {

std::string clock(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

// Prints the trainer's events: a bar redrawn in place on a TTY, otherwise one
// line per step (at most one a second, always the last).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDOUT_FILENO) == 1) {}

  void operator()(const events::Event& event) {
    std::visit([this](const auto& e) { on(e); }, event);
  }

 private:
  void endBar() {
    if (barShown_) {
      std::cout << "\n";
      barShown_ = false;
    }
  }
  void line(const std::string& text, bool error = false) {
    endBar();
    (error ? std::cerr : std::cout) << text << std::endl;
  }

  void on(const events::StartedEvent& e) {
    line(std::string(e.resumed ? "resuming " : "training ") + e.jobName + " in " + e.runDir + " (step " +
         std::to_string(e.startStep) + " of " + std::to_string(e.totalSteps) + ")" +
         (e.setup.empty() ? "" : "\n  " + e.setup));
  }
  void on(const events::StepEvent& e) {
    const double sPerIt = e.stepTimeMs / 1000.0;
    char stats[160];
    std::snprintf(stats, sizeof stats, "%lld/%lld  loss %.4f (avg %.4f)  lr %.2e  %.2f s/it  ETA %s",
                  static_cast<long long>(e.step), static_cast<long long>(e.totalSteps), e.loss, e.lossSmoothed, e.lr,
                  sPerIt, clock(e.etaSeconds).c_str());
    if (tty_) {
      const int width = 24;
      const int filled = e.totalSteps > 0 ? static_cast<int>(width * e.step / e.totalSteps) : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::cout << "\r[" << bar << "] " << stats << "   " << std::flush;
      barShown_ = true;
    } else {
      const auto now = std::chrono::steady_clock::now();
      if (e.step == e.totalSteps || now - lastPlain_ >= std::chrono::seconds(1)) {
        std::cout << "step " << stats << std::endl;
        lastPlain_ = now;
      }
    }
  }
  void on(const events::PlacementEvent& e) {
    std::ostringstream s;
    if (e.afterStep > 0) {  // the same placement, audited again with what that step made
      s << "audit after step " << e.afterStep << ": "
        << (e.audit.empty() ? "clean" : std::to_string(e.audit.size()) + " mismatch(es)") << " (" << e.checkedTensors
        << " attachment tensors checked)";
      for (const auto& a : e.audit) s << "\n  " << a.path << ": expected " << a.expected << ", found " << a.actual;
      line(s.str());
      return;
    }
    s << "placement: " << e.reason;
    std::string dev;
    for (const auto& b : e.blocks) {
      if (b.device != dev) {
        dev = b.device;
        s << "\n  " << dev << ":";
      }
      s << " " << b.id;
    }
    s << "\naudit: " << (e.audit.empty() ? "clean" : std::to_string(e.audit.size()) + " mismatch(es)") << " ("
      << e.checkedTensors << " attachment tensors checked)";
    for (const auto& a : e.audit) s << "\n  " << a.path << ": expected " << a.expected << ", found " << a.actual;
    int64_t hostBytes = 0;  // attachments kept off the cards (train.offload_optimizer_state)
    for (const auto& b : e.blocks) hostBytes += b.hostBytes;
    if (hostBytes > 0) s << "\nin host memory, not on the cards: " << formatBytes(hostBytes) << " of optimizer state";
    line(s.str());
  }
  void on(const events::SampleEvent& e) { line("sample: " + e.path + "  \"" + e.prompt + "\""); }
  void on(const events::CheckpointEvent& e) {
    line("checkpoint: " + e.path +
         (e.removed.empty() ? "" : " (" + std::to_string(e.removed.size()) + " older removed)"));
  }
  void on(const events::ExportEvent& e) { line("lora (" + e.format + "): " + e.path); }
  void on(const events::DatasetEvent& e) {
    std::string s = "dataset " + std::to_string(e.index) + ": " + std::to_string(e.images) + " images, " +
                    std::to_string(e.skipped.size()) + " skipped, " + std::to_string(e.defaultedCaptions) +
                    " without a caption file\n  buckets:";
    for (const auto& b : e.buckets) s += " " + b;
    line(s);  // each skipped file follows as a warning
  }
  void on(const events::CacheProgressEvent& e) {
    char buffer[120];
    if (e.done == e.total && e.encoded == 0)
      std::snprintf(buffer, sizeof buffer, "caching %s %lld/%lld  (all from the cache)", e.stage.c_str(),
                    static_cast<long long>(e.done), static_cast<long long>(e.total));
    else  // how many this run encoded (the rest came from the cache), and how fast
      std::snprintf(buffer, sizeof buffer, "caching %s %lld/%lld  %lld encoded, %.2f/s", e.stage.c_str(),
                    static_cast<long long>(e.done), static_cast<long long>(e.total), static_cast<long long>(e.encoded),
                    e.itemsPerSecond);
    std::string stats = buffer;
    for (const auto& [card, bytes] : e.devicePeakBytes) stats += ", peak " + card + " " + formatBytes(bytes);
    if (tty_) {
      const int width = 24;
      const int filled = e.total > 0 ? static_cast<int>(width * e.done / e.total) : width;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::cout << "\r[" << bar << "] " << stats << "   " << std::flush;
      barShown_ = true;
      if (e.done == e.total) endBar();
    } else if (e.done == e.total) {
      std::cout << stats << std::endl;
    }
  }
  void on(const events::LoadProgressEvent& e) {
    char stats[120];
    std::snprintf(stats, sizeof stats, "loading %s %lld/%lld", e.what.c_str(), static_cast<long long>(e.done),
                  static_cast<long long>(e.total));
    if (tty_) {
      std::cout << "\r" << stats << "   " << std::flush;
      barShown_ = true;
      if (e.done == e.total) endBar();
    } else if (e.done == e.total) {
      std::cout << stats << std::endl;
    }
  }
  void on(const events::WarningEvent& e) { line("warning: " + e.message, true); }
  void on(const events::NoteEvent& e) { line("note: " + e.message); }
  void on(const events::PreflightFailedEvent& e) {
    std::string s = "preflight failed, nothing was trained:";
    for (const auto& p : e.problems) s += "\n  " + p;
    line(s, true);
  }
  void on(const events::PausedEvent& e) { line("paused at step " + std::to_string(e.step)); }
  void on(const events::ResumedEvent& e) { line("resumed at step " + std::to_string(e.step)); }
  void on(const events::StoppedEvent& e) {
    line("stopped at step " + std::to_string(e.step) +
         (e.checkpoint.empty() ? " (no checkpoint)" : "; checkpoint: " + e.checkpoint));
  }
  void on(const events::FinishedEvent& e) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "finished: %lld steps, final loss %.4f, %.1f s", static_cast<long long>(e.step),
                  e.finalLoss, e.wallSeconds);
    std::string s = buf;
    if (e.skippedItems > 0) s += ", " + std::to_string(e.skippedItems) + " unreadable dataset item(s) skipped";
    line(s);
  }
  void on(const events::FailedEvent& e) { line("failed at step " + std::to_string(e.step) + ": " + e.message, true); }

  bool tty_;
  bool barShown_ = false;
  std::chrono::steady_clock::time_point lastPlain_{};
};

struct RunArgs {
  std::string configPath;
  std::vector<std::string> sets;
  std::string runDir;
  int64_t stopAfter = 0;
  std::string devices;   // simulated devices: preflight only
  int nproc = 0;         // local data-parallel ranks; 0 = the config's model.replicas
  StreamOptions stream;  // --events, --control-stdin (EventStream.h)
};

// The command line a rank of --nproc runs: this one without --nproc.
std::vector<std::string> rankArgs(const RunArgs& args) {
  std::vector<std::string> out = {"run", args.configPath};
  for (const auto& s : args.sets) out.insert(out.end(), {"--set", s});
  if (!args.runDir.empty()) out.insert(out.end(), {"--run-dir", args.runDir});
  if (args.stopAfter > 0) out.insert(out.end(), {"--stop-after", std::to_string(args.stopAfter)});
  return out;
}

}  // namespace

// Runs `trainer` on this thread with the progress printer (or the event stream
// of `output`) and the stop signals (core/train/StopSignals); returns the exit
// code. Shared with `resume` (CmdResume.cpp).
int runTrainerWithProgress(train::Trainer& trainer, events::EventBus& bus, EventOutput* output) {
  if (output && output->streaming()) return output->run(trainer, bus);
  ProgressPrinter printer;
  auto sub = bus.subscribe([&printer](const events::Event& e) { printer(e); });
  const train::StopOnSignals signals(trainer, "strata-train");  // Ctrl-C, SIGTERM, SIGHUP: checkpoint and stop
  return train::exitCodeOf(trainer.run());
}

namespace {

int runRun(const RunArgs& args) {
  if (args.nproc > 1) {
    if (!args.devices.empty()) {
      std::cerr << "strata-train run: --devices (a preflight on simulated devices) takes no --nproc" << std::endl;
      return train::kExitBadInput;
    }
    return launchLocalRanks(args.nproc, rankArgs(args), args.stream);
  }
  config::LoadedConfig loaded;
  try {
    loaded = config::loadRunConfig(args.configPath);
  } catch (const std::exception& e) {
    std::cerr << "strata-train run: " << e.what() << std::endl;
    return train::kExitBadInput;
  }
  if (!args.sets.empty()) config::applyOverrides(loaded, args.sets);
  // model.replicas: the ranks --nproc would start (a --devices preflight is one replica's).
  if (args.devices.empty() && loaded.readable) {
    const int ranks = localRanksToStart(args.nproc, loaded.config);
    if (ranks > 1) return launchLocalRanks(ranks, rankArgs(args), args.stream);
  }
  EventOutput output(args.stream);  // before anything prints
  // --devices: the preflight of this run on simulated devices (nothing is trained).
  std::optional<device::Inventory> simulated;
  if (!args.devices.empty()) {
    try {
      simulated = device::simulatedInventory(args.devices);
    } catch (const std::exception& e) {
      std::cerr << "strata-train run: " << e.what() << std::endl;
      return train::kExitBadInput;
    }
  }
  // Reading and validation problems with their lines, before anything is built.
  bool bad = false;
  for (const auto& p : config::validateLoaded(loaded, simulated ? simulated->devices : device::listDevices())) {
    std::cerr << p.format() << std::endl;
    bad = bad || p.isError();
  }
  if (bad) return train::kExitBadInput;
  events::EventBus bus;
  train::TrainerOptions opts;
  opts.runDir = args.runDir;
  opts.stopAfterStep = args.stopAfter;
  opts.configYaml = config::toYaml(loaded.config);
  opts.reportConfigWarnings = false;  // printed above, with their lines
  opts.devices = simulated;
  if (!simulated)
    if (const auto failed = joinDataParallel(loaded.config, opts.configYaml, opts, "strata-train run")) return *failed;
  train::Trainer trainer(loaded.config, bus, opts);
  return runTrainerWithProgress(trainer, bus, &output);
}

}  // namespace

// Registers `run`; `exitCode` receives its result.
void addRunCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Train a LoRA from a run config (Ctrl-C: checkpoint and stop)");
  cmd->add_option("config", args->configPath, "Run config (YAML)")->required();
  cmd->add_option("--set", args->sets, "Override a key, e.g. --set train.steps=100 (repeatable)");
  cmd->add_option("--run-dir", args->runDir, "Run folder (default: <job.training_folder>/<job.name>)")
      ->check(nonEmptyCheck("a folder"));
  cmd->add_option("--stop-after", args->stopAfter, "Checkpoint and stop after this step (as Ctrl-C would)")
      ->check(stopAfterCheck());
  cmd->add_option("--devices", args->devices,
                  "Preflight only, on simulated devices (1x16GB, 4x16GB): is the run refused there? Nothing is "
                  "trained; exit 2 either way, with the reason")
      ->check(nonEmptyCheck("a device list such as 4x16GB"));
  cmd->add_option("--nproc", args->nproc,
                  "Train data-parallel on N local ranks (processes), each a replica of the config's devices "
                  "(docs/data-parallel.md; default: the config's model.replicas); torchrun's launch needs no flag")
      ->check(CLI::Range(1, 1024));
  addStreamOptions(cmd, args->stream);
  cmd->footer("Exit codes: 0 finished, 1 failed during training, 2 bad input or preflight, 130 interrupted.");
  cmd->callback([args, &exitCode] { exitCode = runRun(*args); });
}

}  // namespace strata::cli
