#pragma once
// `run` and `resume` for a parent process (the app, docs/app.md "The training
// process"): --events jsonl writes every trainer event as one JSON line on stdout
// (core/events/EventJson.h) instead of the progress bar, and --control-stdin reads
// control lines ({"v":1,"control":"stop"}, pause, resume, sample, save) from stdin.
// With --control-stdin, the end of stdin (the parent is gone) asks for a checkpoint
// and a stop, as SIGTERM does.
#include <memory>
#include <string>

namespace CLI {
class App;
}
namespace strata::train {
class Trainer;
}
namespace strata::events {
class EventBus;
}

namespace strata::cli {

struct StreamOptions {
  std::string events;  // "" (the progress bar) or "jsonl"
  bool controlStdin = false;
};

// Adds --events and --control-stdin to `cmd`.
void addStreamOptions(CLI::App* cmd, StreamOptions& options);

// Made at the start of a command, before anything is printed: with --events jsonl
// it takes stdout for the events and points file descriptor 1 at stderr, so a stray
// print (a library's, a warning's) lands in the log instead of the stream.
class EventOutput {
 public:
  explicit EventOutput(const StreamOptions& options);
  ~EventOutput();
  EventOutput(const EventOutput&) = delete;
  EventOutput& operator=(const EventOutput&) = delete;

  bool streaming() const { return fd_ >= 0; }
  // Runs `trainer` with its events streamed, the control lines applied and the stop
  // signals (train/StopSignals.h) installed; returns the exit code.
  int run(train::Trainer& trainer, events::EventBus& bus);

 private:
  StreamOptions options_;
  int fd_ = -1;  // the events' stream (the original stdout)
};

}  // namespace strata::cli
