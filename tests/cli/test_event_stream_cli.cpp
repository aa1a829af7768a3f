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
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CliProcess.h"
#include "common/TestSupport.h"
#include "events/EventBus.h"
#include "events/EventJson.h"
#include "train/RunFolder.h"

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
  // Every complete stdout line with its rank (a data-parallel run's lines carry one).
  std::vector<events::RankedEvent> rankedEvents() const {
    std::vector<events::RankedEvent> out;
    std::istringstream lines(readAll(out_));
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      if (lines.eof()) break;  // the line being written
      try {
        out.push_back(events::rankedFromJson(line, "stdout line " + std::to_string(n)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what() << ": " << line;
      }
    }
    return out;
  }
  pid_t pid() const { return pid_; }
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

// How many of `events` are a T from `rank` (-1: those without a rank).
template <class T>
int countOf(const std::vector<events::RankedEvent>& events, int rank) {
  int n = 0;
  for (const auto& e : events) n += std::holds_alternative<T>(e.event) && e.rank.value_or(-1) == rank;
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

// Issue 35 point 8: the app's child process on 2 data-parallel ranks (CPU, Gloo).
// Every line is tagged with its rank; rank 0's stream is a whole run's, rank 1
// sends what the GPU map needs (its placement) and nothing of how the run goes;
// one stop line (to rank 0) stops both ranks with one checkpoint.
TEST(EventStreamCli, TwoRanksStreamRankTaggedEventsAndOneStopStopsBoth) {
  test::TempDir tmp;
  std::vector<std::string> args = demoArgs(tmp / "runs", 2000);
  args.insert(args.end(), {"--set", "train.batch_size=1", "--nproc", "2", "--control-stdin"});
  StreamedRun run(args, tmp.path());
  ASSERT_TRUE(run.waitForAStep()) << run.stderrText();
  run.send(events::controlToJson(events::ControlCommand::Stop));
  EXPECT_EQ(run.wait(), 130) << run.stderrText();
  const auto events = run.rankedEvents();
  ASSERT_FALSE(events.empty()) << run.stderrText();
  for (const auto& e : events) ASSERT_TRUE(e.rank.has_value()) << events::toJson(e.event);
  EXPECT_EQ(countOf<events::StartedEvent>(events, 0), 1);
  EXPECT_GE(countOf<events::PlacementEvent>(events, 0), 1);
  EXPECT_GE(countOf<events::PlacementEvent>(events, 1), 1);  // the replica's map
  EXPECT_GE(countOf<events::StepEvent>(events, 0), 1);
  // Rank 0's throughput counts the world: 2 ranks x batch 1 images a step.
  for (const auto& e : events)
    if (const auto* s = std::get_if<events::StepEvent>(&e.event); s && e.rank == 0)
      EXPECT_NEAR(s->imagesPerSec * s->stepTimeMs / 1000.0, 2.0, 1e-9) << "step " << s->step;
  // Of rank 1, nothing that says how the run goes: rank 0 alone writes the folder and ends the stream.
  for (const auto& e : events)
    if (e.rank == 1)
      EXPECT_TRUE(std::holds_alternative<events::PlacementEvent>(e.event) ||
                  std::holds_alternative<events::StepEvent>(e.event))
          << events::toJson(e.event, e.rank);
  ASSERT_TRUE(std::holds_alternative<events::StoppedEvent>(events.back().event))
      << events::eventName(events.back().event);
  EXPECT_EQ(events.back().rank, 0);
  const auto& stopped = std::get<events::StoppedEvent>(events.back().event);
  EXPECT_TRUE(fs::is_directory(stopped.checkpoint)) << stopped.checkpoint;
  EXPECT_EQ(countOf<events::CheckpointEvent>(events, 0), 1);
  // One run folder, with one checkpoint.
  size_t folders = 0;
  for (const auto& d : fs::directory_iterator(tmp / "runs")) {
    ++folders;
    EXPECT_EQ(train::RunFolder(d.path()).checkpoints().size(), 1u) << d.path();
  }
  EXPECT_EQ(folders, 1u);
}

// A rank that dies without a word is a failed event naming it, before rank 0's own failure.
TEST(EventStreamCli, ARankKilledIsAFailedEventNamingIt) {
  test::TempDir tmp;
  std::vector<std::string> args = demoArgs(tmp / "runs", 100000);
  args.insert(args.end(), {"--set", "train.batch_size=1", "--nproc", "2", "--control-stdin"});
  StreamedRun run(args, tmp.path());
  ASSERT_TRUE(run.waitForAStep()) << run.stderrText();
  const pid_t rank1 = rankPid(run.pid(), 1);
  ASSERT_GT(rank1, 0) << "rank 1 not found among the launcher's children";
  ::kill(rank1, SIGKILL);
  EXPECT_EQ(run.wait(), 1) << run.stderrText();
  const auto events = run.rankedEvents();
  const events::RankedEvent* firstFailure = nullptr;
  for (const auto& e : events)
    if (std::holds_alternative<events::FailedEvent>(e.event)) {
      firstFailure = &e;
      break;
    }
  ASSERT_NE(firstFailure, nullptr) << run.stdoutText().substr(0, 4000);
  EXPECT_EQ(firstFailure->rank, 1);
  EXPECT_NE(std::get<events::FailedEvent>(firstFailure->event).message.find("rank 1 was killed by signal 9"),
            std::string::npos)
      << std::get<events::FailedEvent>(firstFailure->event).message;
}

// model.replicas starts the ranks as --nproc would; --nproc 1 on the command line wins.
TEST(EventStreamCli, TheConfigsReplicasStartTheRanksAndNprocOverridesThem) {
  test::TempDir tmp;
  std::vector<std::string> args = demoArgs(tmp / "runs", 2);
  args.insert(args.end(), {"--set", "train.batch_size=1", "--set", "model.replicas=2"});
  fs::create_directories(tmp / "a");
  fs::create_directories(tmp / "b");
  {
    StreamedRun run(args, tmp / "a");
    run.closeStdin();
    ASSERT_EQ(run.wait(), 0) << run.stderrText();
    const auto events = run.rankedEvents();
    EXPECT_GE(countOf<events::PlacementEvent>(events, 1), 1) << run.stdoutText().substr(0, 2000);
    EXPECT_EQ(countOf<events::FinishedEvent>(events, 0), 1);
  }
  args.insert(args.end(), {"--set", "job.training_folder=" + (tmp / "runs1").string(), "--nproc", "1"});
  StreamedRun one(args, tmp / "b");
  one.closeStdin();
  ASSERT_EQ(one.wait(), 0) << one.stderrText();
  const auto events = one.rankedEvents();
  EXPECT_EQ(countOf<events::FinishedEvent>(events, -1), 1);  // one process: no rank on its lines
  EXPECT_EQ(countOf<events::PlacementEvent>(events, 1), 0);
}
