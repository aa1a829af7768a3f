#pragma once
// What SIGINT (Ctrl-C), SIGTERM (kill, systemd, docker, SLURM) and SIGHUP (a
// closed terminal or ssh session) do while a trainer runs, for the CLI and the
// app alike: the first asks the trainer to write a checkpoint and stop (an
// atomic store, safe in a handler) and says so on stderr; a second one ends the
// process at once with that signal's default action (the previous checkpoint
// stays intact, checkpoints being written aside and renamed into place).
// SIGPIPE is ignored meanwhile, so a vanished reader of the output cannot end
// the run without its checkpoint.
#include <csignal>

namespace strata::train {

class Trainer;

class StopOnSignals {
 public:
  // Installs the handlers for `trainer` until destroyed (the previous handlers
  // come back then). `who` prefixes the stderr line ("strata-train", "strata");
  // `action` says what the stop does (a string literal: the handler writes it).
  explicit StopOnSignals(Trainer& trainer, const char* who = "strata",
                         const char* action = "writing a checkpoint, then stopping");
  // For work with no trainer (`sample`, `export`): the first signal is only noted
  // (signalReceived(), polled between steps or files), or, while exitAtOnce is
  // set (loading: nothing to keep), ends the process at once with 128 + signal.
  explicit StopOnSignals(const char* who, const char* action = "stopping");
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

  // The signal that asked for the stop while this guard was installed, 0 if none.
  int signalReceived() const;
  // While set, the first signal ends the process at once (exit code 128 + signal,
  // after saying so): for stretches with nothing to keep or clean up.
  void setExitAtOnce(bool atOnce);

  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

 private:
  StopOnSignals(Trainer* trainer, const char* who, const char* action);
  Trainer* previousTarget_ = nullptr;
  struct sigaction previous_[3] = {};
  struct sigaction previousPipe_ = {};
};

}  // namespace strata::train
