// `strata-train run --events jsonl [--control-stdin]`, the stream the app reads
// (docs/training.md): stdout holds only event lines, each decodable, ending with
// how the run ended; other output goes to stderr; a stop line on stdin stops the
// run with a checkpoint (exit 130), a bad control line is a warning, and the end
// of stdin stops it too. The demo on the CPU, a few steps.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "events/EventBus.h"
#include "events/EventJson.h"

using namespace strata;
using namespace strata::test::cli;
namespace fs = std::filesystem;

namespace {

// strata-train with stdout and stderr in files and stdin a pipe the test writes.
class StreamedRun {
 public:
  StreamedRun(const std::vector<std::string>& args, const fs::path& dir)
      : out_(dir / "out.jsonl"), err_(dir / "err.log") {
    int fds[2];
    if (::pipe(fds) != 0) return;
    std::vector<std::string> all = {strataTrainPath().string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string outPath = out_.string(), errPath = err_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[0], STDIN_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      const int o = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, STDOUT_FILENO);
      ::dup2(e, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[0]);
    stdin_ = fds[1];
  }
  ~StreamedRun() {
    closeStdin();
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  void send(const std::string& line) {
    const std::string bytes = line + "\n";
    ASSERT_EQ(::write(stdin_, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }
  void closeStdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  // The exit code (128 + signal when killed); -1 when it had not ended within 3 minutes (it is killed then).
  int wait() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(3);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() >= end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        done_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    done_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Every complete stdout line decoded (a line that does not decode fails the test).
  std::vector<events::Event> events() const {
    std::vector<events::Event> out;
    std::istringstream lines(readAll(out_));
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      if (lines.eof()) break;  // the line being written
      try {
        out.push_back(events::fromJson(line, "stdout line " + std::to_string(n)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what() << ": " << line;
      }
    }
    return out;
  }
  // Waits (up to 2 minutes) for the first step event.
  bool waitForAStep() const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (std::chrono::steady_clock::now() < end) {
      for (const auto& e : events())
        if (std::holds_alternative<events::StepEvent>(e)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  std::string stderrText() const { return readAll(err_); }
  std::string stdoutText() const { return readAll(out_); }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  int stdin_ = -1;
  bool done_ = false;
};

std::vector<std::string> demoArgs(const fs::path& runs, int steps) {
  return {"run",      (test::sourceDir() / "configs" / "demo.yaml").string(),
          "--set",    "train.steps=" + std::to_string(steps),
          "--set",    "sample.sample_every=0",
          "--set",    "save.save_every=0",
          "--set",    "job.training_folder=" + runs.string(),
          "--events", "jsonl"};
}

template <class T>
int countOf(const std::vector<events::Event>& events) {
  int n = 0;
  for (const auto& e : events) n += std::holds_alternative<T>(e);
  return n;
}

}  // namespace

TEST(EventStreamCli, StdoutHoldsOneDecodableEventPerLine) {
  ASSERT_TRUE(fs::exists(strataTrainPath())) << "strata-train not built at " << strataTrainPath();
  test::TempDir tmp;
  StreamedRun run(demoArgs(tmp / "runs", 3), tmp.path());
  run.closeStdin();  // without --control-stdin the end of stdin means nothing
  ASSERT_EQ(run.wait(), 0) << run.stderrText();
  const auto events = run.events();
  ASSERT_FALSE(events.empty()) << run.stdoutText();
  EXPECT_EQ(countOf<events::StartedEvent>(events), 1);
  EXPECT_EQ(countOf<events::StepEvent>(events), 3);
  EXPECT_GE(countOf<events::PlacementEvent>(events), 1);
  ASSERT_TRUE(std::holds_alternative<events::FinishedEvent>(events.back())) << events::eventName(events.back());
  EXPECT_EQ(std::get<events::FinishedEvent>(events.back()).step, 3);
  // Nothing but events on stdout (its last line ends with a newline), and no event on stderr.
  const std::string out = run.stdoutText();
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(run.stderrText().find("{\"v\":"), std::string::npos) << run.stderrText();
}

TEST(EventStreamCli, AStopLineStopsWithACheckpointAndABadLineIsAWarning) {
  test::TempDir tmp;
  std::vector<std::string> args = demoArgs(tmp / "runs", 2000);
  args.push_back("--control-stdin");
  StreamedRun run(args, tmp.path());
  run.send(R"({"v":1,"control":"explode"})");
  ASSERT_TRUE(run.waitForAStep()) << run.stderrText();
  run.send(events::controlToJson(events::ControlCommand::Stop));
  EXPECT_EQ(run.wait(), 130) << run.stderrText();
  const auto events = run.events();
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<events::StoppedEvent>(events.back())) << events::eventName(events.back());
  const auto& stopped = std::get<events::StoppedEvent>(events.back());
  EXPECT_GE(stopped.step, 1);
  EXPECT_LT(stopped.step, 2000);
  EXPECT_TRUE(fs::is_directory(stopped.checkpoint)) << stopped.checkpoint;
  bool warned = false;
  for (const auto& e : events)
    if (const auto* w = std::get_if<events::WarningEvent>(&e))
      warned |= w->message.rfind("control line 1: unknown command \"explode\"", 0) == 0;
  EXPECT_TRUE(warned) << run.stdoutText().substr(0, 2000);
}

TEST(EventStreamCli, TheEndOfStdinStopsWithACheckpoint) {
  test::TempDir tmp;
  std::vector<std::string> args = demoArgs(tmp / "runs", 2000);
  args.push_back("--control-stdin");
  StreamedRun run(args, tmp.path());
  ASSERT_TRUE(run.waitForAStep()) << run.stderrText();
  run.closeStdin();  // the app went away
  EXPECT_EQ(run.wait(), 130) << run.stderrText();
  const auto events = run.events();
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<events::StoppedEvent>(events.back())) << events::eventName(events.back());
  EXPECT_FALSE(std::get<events::StoppedEvent>(events.back()).checkpoint.empty());
}
