#include "EventStream.h"

#include <CLI/CLI.hpp>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "dist/LaunchEnv.h"
#include "events/EventBus.h"
#include "events/EventJson.h"
#include "train/StopSignals.h"
#include "train/Trainer.h"

namespace strata::cli {

namespace {

// Writes event lines to one file descriptor, whole lines at a time, from any thread.
class LineWriter {
 public:
  explicit LineWriter(int fd) : fd_(fd) {}
  // False once a write failed (the reader went away); later lines are dropped.
  bool write(std::string line) {
    line += '\n';
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) return false;
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        broken_ = true;
        return false;
      }
      p += n;
      left -= size_t(n);
    }
    return true;
  }

 private:
  int fd_;
  std::mutex mutex_;
  bool broken_ = false;
};

// Applies control lines from stdin to the trainer on its own thread. Polls, so
// the destructor can end it without waiting for a line that never comes.
class StdinControl {
 public:
  StdinControl(train::Trainer& trainer, events::EventBus& bus)
      : trainer_(trainer), bus_(bus), thread_([this] { loop(); }) {}
  ~StdinControl() {
    done_ = true;
    thread_.join();
  }

 private:
  void warn(const std::string& message) { bus_.publish(events::WarningEvent{message, 0}); }

  void apply(events::ControlCommand command) {
    switch (command) {
      case events::ControlCommand::Stop:
        trainer_.requestStop();
        break;
      case events::ControlCommand::Pause:
        trainer_.setPaused(true);
        break;
      case events::ControlCommand::Resume:
        trainer_.setPaused(false);
        break;
      case events::ControlCommand::SampleNow:
        trainer_.requestSample();
        break;
      case events::ControlCommand::SaveNow:
        trainer_.requestSave();
        break;
    }
  }

  void loop() {
    events::LineSplitter lines(events::kMaxControlLineBytes);
    char buffer[1024];
    while (!done_) {
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int ready = ::poll(&p, 1, 100);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) continue;
      const ssize_t n = ready < 0 ? -1 : ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // The app that started this run is gone (or closed its end): keep what was trained.
        warn("the control input (stdin) closed: writing a checkpoint, then stopping");
        trainer_.requestStop();
        return;
      }
      for (const auto& line : lines.feed(std::string_view(buffer, size_t(n)))) {
        const std::string where = "control line " + std::to_string(line.number);
        if (line.tooLong) {
          warn(where + ": longer than " + std::to_string(events::kMaxControlLineBytes) + " bytes, ignored");
          continue;
        }
        if (line.text.empty()) continue;
        try {
          apply(events::controlFromJson(line.text, where));
        } catch (const std::exception& e) {
          warn(std::string(e.what()) + " (ignored)");
        }
      }
    }
  }

  train::Trainer& trainer_;
  events::EventBus& bus_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace

void addStreamOptions(CLI::App* cmd, StreamOptions& options) {
  cmd->add_option("--events", options.events,
                  "jsonl: write every event as one JSON line on stdout instead of the progress bar (for the app; "
                  "other output goes to stderr)")
      ->check(CLI::IsMember({"jsonl"}));
  cmd->add_flag("--control-stdin", options.controlStdin,
                "Read control lines from stdin ({\"v\":1,\"control\":\"stop\"}; pause, resume, sample, save); the "
                "end of stdin writes a checkpoint and stops");
}

EventOutput::EventOutput(const StreamOptions& options) : options_(options) {
  if (options_.events != "jsonl") return;
  std::cout.flush();
  std::fflush(stdout);
  fd_ = ::dup(STDOUT_FILENO);
  if (fd_ < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::perror("strata-train: cannot take stdout for the event stream");
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
}

EventOutput::~EventOutput() {
  if (fd_ >= 0) ::close(fd_);
}

int EventOutput::run(train::Trainer& trainer, events::EventBus& bus) {
  LineWriter writer(fd_);
  // A rank of a data-parallel run tags its lines (the launcher and the app tell the ranks apart).
  std::optional<int> rank;
  try {
    if (const auto env = dist::launchEnvFrom()) rank = env->rank;
  } catch (const std::exception&) {
    // Refused by the join already (joinDataParallel names the variable).
  }
  std::atomic<bool> stopAsked{false};  // events come from the training and the control thread
  auto sub = bus.subscribe([&](const events::Event& e) {
    // A reader that went away cannot see the run any more: keep what was trained.
    if (!writer.write(events::toJson(e, rank)) && !stopAsked.exchange(true)) trainer.requestStop();
  });
  const train::StopOnSignals signals(trainer, "strata-train");  // SIGTERM from the app: checkpoint and stop
  std::unique_ptr<StdinControl> control;
  if (options_.controlStdin) control = std::make_unique<StdinControl>(trainer, bus);
  const int code = train::exitCodeOf(trainer.run());
  control.reset();
  return code;
}

}  // namespace strata::cli
