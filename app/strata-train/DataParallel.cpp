#include "DataParallel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/version.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "common/Error.h"
#include "common/Version.h"
#include "device/DeviceInventory.h"
#include "dist/AveragingReducer.h"
#include "dist/C10dCollective.h"
#include "dist/LaunchEnv.h"
#include "dist/ParallelDims.h"
#include "events/EventJson.h"

extern char** environ;

namespace strata::cli {

namespace {

// FNV-1a, 64 bits: the same text gives the same value on every host and build.
std::string fingerprintOf(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A timeout in seconds from the environment; `fallback` where unset. Throws ConfigError naming it.
std::chrono::milliseconds secondsFromEnv(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::chrono::seconds(fallback);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 || v > 7 * 24 * 3600)
    throw ConfigError(std::string(name) + "='" + text + "' is not a number of seconds in 1..604800");
  return std::chrono::seconds(v);
}

// Set by --nproc's launcher in its ranks' environment: their count is the command
// line's (or the config's), so model.replicas is not compared with it.
constexpr const char* kOwnLaunchVariable = "STRATA_NPROC_LAUNCH";

}  // namespace

int localRanksToStart(int nproc, const config::RunConfig& cfg) {
  if (nproc > 0) return nproc;
  if (const char* ws = std::getenv("WORLD_SIZE"); ws && *ws && std::string(ws) != "1") return 1;  // a rank already
  return static_cast<int>(std::max<int64_t>(cfg.model.replicas, 1));
}

std::optional<int> joinDataParallel(config::RunConfig& cfg, const std::string& runYaml, train::TrainerOptions& opts,
                                    const std::string& command) {
  try {
    const auto env = dist::launchEnvFrom();
    if (!env) return std::nullopt;
    const char* own = std::getenv(kOwnLaunchVariable);
    if (cfg.model.replicas > 1 && !(own && std::string(own) == "1") && cfg.model.replicas != env->localWorldSize)
      throw ConfigError("model.replicas is " + std::to_string(cfg.model.replicas) +
                        ", but this launch starts LOCAL_WORLD_SIZE=" + std::to_string(env->localWorldSize) +
                        " rank(s) on this node: start " + std::to_string(cfg.model.replicas) +
                        " per node, or set model.replicas to 1 and let the launcher decide");
    dist::ConnectOptions co;
    co.connectTimeout = secondsFromEnv("STRATA_DIST_CONNECT_TIMEOUT_S", 300);
    co.storeTimeout = secondsFromEnv("STRATA_DIST_TIMEOUT_S", 1800);
    co.collectiveTimeout = co.storeTimeout;
    // The config as every rank runs it, and this build: what must match.
    co.fingerprint = fingerprintOf(runYaml + "\n" + kVersion + "\n" + TORCH_VERSION);
    // The replica: the config's device set, shifted to this local rank's group of cards.
    std::vector<int> nodeCards;
    for (const auto& d : device::listDevices())
      if (!d.isCpu()) nodeCards.push_back(d.index);
    const dist::ParallelDims dims = dist::parallelDimsOf(cfg, *env, nodeCards);
    if (!dims.cards.empty()) cfg.model.gpuIds = dims.cards;
    co.device = dims.device();
    if (env->backend == "gloo") co.device = c10::Device(c10::kCPU);  // Gloo on the host, whatever the cards
    if (env->backend == "nccl" && !co.device.is_cuda())
      throw ConfigError("STRATA_DIST_BACKEND=nccl: this rank trains on the CPU (NCCL reduces CUDA tensors)");
    auto collective = dist::connect(*env, co);
    opts.collective = collective;
    opts.reducer = std::make_shared<dist::AveragingReducer>(collective, env->overlap);
    return std::nullopt;
  } catch (const std::exception& e) {
    std::cerr << command << ": data-parallel: " << e.what() << std::endl;
    return train::kExitBadInput;
  }
}

namespace {

std::atomic<int> pendingSignal{0};
void onSignal(int sig) { pendingSignal.store(sig); }

// A port nobody listens on now (the kernel's pick), for rank 0's store.
int freeLocalPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw IoError(std::string("finding a free port on 127.0.0.1: ") + std::strerror(err));
  return ntohs(a.sin_port);
}

// Copies `fd`'s lines to stderr with `prefix`, until it closes.
std::thread prefixLines(int fd, std::string prefix) {
  return std::thread([fd, prefix = std::move(prefix)] {
    std::string pending;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::cerr << prefix << pending.substr(0, nl + 1) << std::flush;
        pending.erase(0, nl + 1);
      }
    }
    if (!pending.empty()) std::cerr << prefix << pending << std::endl;
    ::close(fd);
  });
}

// With --events jsonl: the ranks' event lines onto the launcher's stdout, whole
// lines from several threads, and what it takes to report a rank that died.
class EventRelay {
 public:
  explicit EventRelay(int nproc) : saidFailed_(size_t(nproc), false), lastMemory_(size_t(nproc)) {}

  // Copies rank `rank`'s stdout (fd) until it closes: rank 0's lines all (its
  // failure held for the end), the others' placements, failures and a step's
  // memory at most once a second.
  std::thread follow(int fd, int rank) {
    return std::thread([this, fd, rank] {
      events::LineSplitter lines(events::kMaxEventLineBytes);
      char buf[65536];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (auto& line : lines.feed(std::string_view(buf, size_t(n)))) take(rank, line);
      }
      for (auto& line : lines.finish()) take(rank, line);
      ::close(fd);
    });
  }

  // After every rank ended: a failed event for each failed rank that said nothing
  // (killed, crashed), then rank 0's own failure, so the first failure the reader
  // sees is the rank that caused it (rank 0's is then often a collective that broke).
  void finish(const std::vector<std::string>& deaths) {
    for (size_t r = 0; r < deaths.size(); ++r) {
      if (deaths[r].empty() || saidFailed_[r]) continue;
      events::FailedEvent e;
      e.message = deaths[r];
      e.step = lastStep_;
      e.lastGoodCheckpoint = lastCheckpoint_;
      write(events::toJson(e, static_cast<int>(r)));
    }
    if (!heldFailure_.empty()) write(heldFailure_);
  }

  // A write to stdout failed: the reader (the app) went away.
  bool readerGone() const { return readerGone_.load(); }

 private:
  void take(int rank, const events::LineSplitter::Line& line) {
    if (line.tooLong) {
      if (rank == 0)
        write(events::toJson(events::WarningEvent{"rank 0 sent an event line longer than " +
                                                      std::to_string(events::kMaxEventLineBytes) + " bytes; dropped",
                                                  lastStep_},
                             0));
      return;
    }
    if (line.text.empty()) return;
    events::Event event;
    try {
      event = events::rankedFromJson(line.text,
                                     "rank " + std::to_string(rank) + "'s events, line " + std::to_string(line.number))
                  .event;
    } catch (const std::exception& e) {
      std::cerr << "strata-train: " << e.what() << " (dropped)" << std::endl;
      return;
    }
    const bool failed = std::holds_alternative<events::FailedEvent>(event);
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (failed) saidFailed_[size_t(rank)] = true;
    if (rank == 0) {
      if (const auto* s = std::get_if<events::StepEvent>(&event)) lastStep_ = s->step;
      if (const auto* c = std::get_if<events::CheckpointEvent>(&event)) lastCheckpoint_ = c->path;
      if (failed) {
        heldFailure_ = line.text;
        return;
      }
      write(line.text);
      return;
    }
    if (const auto* s = std::get_if<events::StepEvent>(&event)) {
      const auto now = std::chrono::steady_clock::now();
      auto& last = lastMemory_[size_t(rank)];
      if (s->memory.empty() || (last && now - *last < std::chrono::seconds(1))) return;
      last = now;
      write(line.text);
    } else if (failed || std::holds_alternative<events::PlacementEvent>(event)) {
      write(line.text);
    }
  }

  void write(std::string line) {
    line += '\n';
    std::lock_guard<std::mutex> lock(writeMutex_);
    if (broken_) return;  // the reader went away: the ranks see their own stdin or signals
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(STDOUT_FILENO, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        broken_ = true;
        readerGone_ = true;
        return;
      }
      p += n;
      left -= size_t(n);
    }
  }

  std::atomic<bool> readerGone_{false};
  std::mutex stateMutex_;  // held by one reader at a time: the order of lines per rank is kept
  std::mutex writeMutex_;
  bool broken_ = false;
  std::vector<bool> saidFailed_;
  std::vector<std::optional<std::chrono::steady_clock::time_point>> lastMemory_;
  int64_t lastStep_ = 0;
  std::string lastCheckpoint_;
  std::string heldFailure_;
};

struct Rank {
  pid_t pid = -1;
  bool done = false;
  int code = 0;    // exit code, or 128 + signal
  int signal = 0;  // the signal that ended it
};

}  // namespace

int launchLocalRanks(int nproc, const std::vector<std::string>& args, const StreamOptions& stream) {
  if (const char* ws = std::getenv("WORLD_SIZE"); ws && std::string(ws) != "1") {
    std::cerr << "strata-train: --nproc starts its own ranks; WORLD_SIZE=" << ws
              << " is set (torchrun's launch): leave out --nproc there" << std::endl;
    return train::kExitBadInput;
  }
  int port = 0;
  try {
    port = freeLocalPort();
  } catch (const std::exception& e) {
    std::cerr << "strata-train: " << e.what() << std::endl;
    return train::kExitFailed;
  }
  const std::string exe = "/proc/self/exe";
  const bool streaming = stream.events == "jsonl";
  std::unique_ptr<EventRelay> relay;
  if (streaming) relay = std::make_unique<EventRelay>(nproc);
  std::vector<std::thread> eventReaders(static_cast<size_t>(nproc));

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction oldInt {
  }, oldTerm{}, oldHup{};
  ::sigaction(SIGINT, &sa, &oldInt);
  ::sigaction(SIGTERM, &sa, &oldTerm);
  ::sigaction(SIGHUP, &sa, &oldHup);
  // A reader of the event stream that went away shows as a failed write, not SIGPIPE.
  struct sigaction ignore {
  }, oldPipe{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &oldPipe);
  const auto restoreSignals = [&] {
    ::sigaction(SIGINT, &oldInt, nullptr);
    ::sigaction(SIGTERM, &oldTerm, nullptr);
    ::sigaction(SIGHUP, &oldHup, nullptr);
    ::sigaction(SIGPIPE, &oldPipe, nullptr);
  };

  std::vector<Rank> ranks(static_cast<size_t>(nproc));
  std::vector<std::thread> readers;
  for (int r = 0; r < nproc; ++r) {
    // The environment: ours without the launch variables, then this rank's.
    std::vector<std::string> envText;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool launchVar = kv.rfind(std::string(kOwnLaunchVariable) + "=", 0) == 0;
      for (const char* name : dist::kLaunchVariables)
        launchVar = launchVar || kv.rfind(std::string(name) + "=", 0) == 0;
      if (!launchVar) envText.push_back(kv);
    }
    envText.push_back("RANK=" + std::to_string(r));
    envText.push_back("WORLD_SIZE=" + std::to_string(nproc));
    envText.push_back("LOCAL_RANK=" + std::to_string(r));
    envText.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    envText.push_back("MASTER_ADDR=127.0.0.1");
    envText.push_back("MASTER_PORT=" + std::to_string(port));
    envText.push_back(std::string(kOwnLaunchVariable) + "=1");
    // The rank's command line: the stream options for the app's child process, its control to rank 0 alone.
    std::vector<std::string> argvText = {"strata-train"};
    argvText.insert(argvText.end(), args.begin(), args.end());
    if (streaming) argvText.insert(argvText.end(), {"--events", "jsonl"});
    if (streaming && stream.controlStdin && r == 0) argvText.push_back("--control-stdin");
    std::vector<char*> argv, envp;
    for (auto& a : argvText) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envText) envp.push_back(e.data());
    envp.push_back(nullptr);
    int errPipe[2] = {-1, -1}, outPipe[2] = {-1, -1};
    // O_CLOEXEC: a rank's pipe stays out of the ranks started after it.
    const bool piped = (r == 0 || ::pipe2(errPipe, O_CLOEXEC) == 0) && (!streaming || ::pipe2(outPipe, O_CLOEXEC) == 0);
    const int pipeErrno = errno;
    const pid_t launcher = ::getpid();
    const pid_t pid = piped ? ::fork() : -1;
    const int startErrno = piped ? errno : pipeErrno;  // why the rank could not start (pid < 0)
    if (pid == 0) {
      // A launcher that dies (SIGKILL) takes its ranks along: SIGTERM, a checkpoint and stop.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(train::kExitFailed);
      // Only async-signal-safe calls until exec. A process group of its own: the
      // terminal's Ctrl-C reaches the launcher, which forwards it once.
      ::setpgid(0, 0);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGHUP, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);  // ignored in the launcher only (an ignored signal stays so across exec)
      if (streaming) {
        ::dup2(outPipe[1], STDOUT_FILENO);
      } else if (r > 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0) ::dup2(null, STDOUT_FILENO);
      }
      if (r > 0) {
        ::dup2(errPipe[1], STDERR_FILENO);
        // The app's control lines are rank 0's to read.
        const int null = ::open("/dev/null", O_RDONLY);
        if (streaming && null >= 0) ::dup2(null, STDIN_FILENO);
      }
      ::execve(exe.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    if (r > 0 && errPipe[1] >= 0) {
      ::close(errPipe[1]);
      if (pid > 0)
        readers.push_back(prefixLines(errPipe[0], "[rank " + std::to_string(r) + "] "));
      else
        ::close(errPipe[0]);
    }
    if (outPipe[1] >= 0) {
      ::close(outPipe[1]);
      if (pid > 0)
        eventReaders[size_t(r)] = relay->follow(outPipe[0], r);
      else
        ::close(outPipe[0]);
    }
    if (pid < 0) {
      std::cerr << "strata-train: starting rank " << r << ": " << (piped ? "fork: " : "pipe: ")
                << std::strerror(startErrno) << std::endl;
      for (auto& k : ranks)
        if (k.pid > 0) ::kill(k.pid, SIGKILL);
      for (auto& k : ranks)
        if (k.pid > 0) ::waitpid(k.pid, nullptr, 0);
      for (auto& t : readers) t.join();
      for (auto& t : eventReaders)
        if (t.joinable()) t.join();
      if (relay) {
        std::vector<std::string> deaths(static_cast<size_t>(nproc));
        deaths[size_t(r)] = "starting rank " + std::to_string(r) + ": " + std::strerror(startErrno);
        relay->finish(deaths);
      }
      restoreSignals();
      return train::kExitFailed;
    }
    ranks[static_cast<size_t>(r)].pid = pid;
  }

  // Once a rank ended (failed, or stopped on its own: a stop seen before the first
  // step by one rank only) the others get this long to end too (their next
  // collective fails, or they finish), then SIGTERM (a checkpoint), then SIGKILL.
  constexpr auto kGraceAfterFailure = std::chrono::seconds(60);
  constexpr auto kGraceAfterTerm = std::chrono::seconds(30);
  int firstFailed = -1, firstEnded = -1;
  std::chrono::steady_clock::time_point endedAt{}, termAt{};
  bool termSent = false, killSent = false, readerGoneSeen = false;
  int running = nproc;
  std::vector<std::string> deaths(static_cast<size_t>(nproc));  // each failed rank's end, in words
  while (running > 0) {
    if (const int sig = pendingSignal.exchange(0); sig != 0)
      for (auto& k : ranks)
        if (!k.done) ::kill(k.pid, sig);
    // As one process does when its stream's reader goes away: keep what was trained.
    if (relay && relay->readerGone() && !readerGoneSeen) {
      readerGoneSeen = true;
      std::cerr << "strata-train: the event stream's reader went away: the ranks write a checkpoint and stop"
                << std::endl;
      for (auto& k : ranks)
        if (!k.done) ::kill(k.pid, SIGTERM);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        Rank& k = ranks[r];
        if (k.pid != pid) continue;
        k.done = true;
        --running;
        if (firstEnded < 0) {
          firstEnded = static_cast<int>(r);
          endedAt = std::chrono::steady_clock::now();
        }
        if (WIFEXITED(status)) k.code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) {
          k.signal = WTERMSIG(status);
          k.code = 128 + k.signal;
        }
        const bool failed = k.code != train::kExitOk && k.code != train::kExitInterrupted;
        if (!failed) continue;
        // Each failure said: the first one reaped need not be the cause (a rank
        // whose collective failed can end before the one that was killed is reaped).
        deaths[r] = "rank " + std::to_string(r) +
                    (k.signal ? " was killed by signal " + std::to_string(k.signal) + " (" + strsignal(k.signal) + ")"
                              : " exited with code " + std::to_string(k.code));
        std::cerr << "strata-train: " << deaths[r] << (firstFailed < 0 ? "; the other ranks stop" : "") << std::endl;
        if (firstFailed < 0) firstFailed = static_cast<int>(r);
      }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (firstEnded >= 0 && !termSent && now - endedAt > kGraceAfterFailure) {
      if (firstFailed < 0)
        std::cerr << "strata-train: rank " << firstEnded << " ended " << kGraceAfterFailure.count() << " s ago and "
                  << running << " rank(s) still run; stopping them" << std::endl;
      for (auto& k : ranks)
        if (!k.done) ::kill(k.pid, SIGTERM);
      termSent = true;
      termAt = now;
    }
    if (termSent && !killSent && now - termAt > kGraceAfterTerm) {
      for (auto& k : ranks)
        if (!k.done) ::kill(k.pid, SIGKILL);
      killSent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : readers) t.join();
  // Every rank has ended, so each stdout has closed: these end.
  for (auto& t : eventReaders)
    if (t.joinable()) t.join();
  if (relay) relay->finish(deaths);
  restoreSignals();

  if (firstFailed >= 0) {
    const Rank& k = ranks[static_cast<size_t>(firstFailed)];
    std::cerr << "strata-train: failed: rank " << firstFailed << " of " << nproc << " ended with code " << k.code
              << std::endl;
    return k.code == train::kExitBadInput ? train::kExitBadInput : train::kExitFailed;
  }
  for (const auto& k : ranks)
    if (k.code == train::kExitInterrupted) return train::kExitInterrupted;
  return train::kExitOk;
}

}  // namespace strata::cli
