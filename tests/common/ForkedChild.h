#pragma once
// Runs a piece of a test in a forked child, so a crash (SIGSEGV), a hang or a
// runaway allocation is a failed expectation in the parent rather than the end
// of the test run. The child gets a wall-clock limit (SIGKILL after it) and an
// address-space budget over what it inherits (RLIMIT_AS), and sends back the
// text the body returns, or the exception it threw.
//
// The child has the forking thread only: it runs LibTorch on one thread
// (at::set_num_threads(1) first), so no parallel region waits on pool threads
// that were not copied by fork (the image fuzz cases decode into tensors).
#include <ATen/Parallel.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <string>

#include "common/Error.h"

namespace strata::test {

struct ChildOutcome {
  enum class Kind {
    Returned,    // the body returned; `text` is what it returned
    TypedError,  // it threw a strata::Error (IoError, ConfigError, ...); `text` is what()
    OtherError,  // it threw another std::exception (std::bad_alloc, nlohmann's, ...)
    Crashed,     // a signal ended it (`signal`)
    TimedOut,    // it ran past the limit and was killed
  };
  Kind kind = Kind::Crashed;
  std::string text;
  int signal = 0;
  double seconds = 0;

  bool ok() const { return kind == Kind::Returned || kind == Kind::TypedError; }
  std::string describe() const {
    switch (kind) {
      case Kind::Returned:
        return "returned: " + text;
      case Kind::TypedError:
        return "typed error: " + text;
      case Kind::OtherError:
        return "untyped exception: " + text;
      case Kind::Crashed:
        return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
      case Kind::TimedOut:
        return "still running after " + std::to_string(seconds) + " s (a hang)";
    }
    return "?";
  }
};

// The process's virtual size now (what a child inherits), from /proc/self/statm.
inline std::size_t currentAddressSpaceBytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages = 0;
  in >> pages;
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// Runs `body` in a child with `seconds` of wall time and `extraBytes` of address
// space over the parent's current size.
inline ChildOutcome runInChild(const std::function<std::string()>& body, double seconds,
                               std::size_t extraBytes = std::size_t{1} << 30) {
  int fds[2];
  if (::pipe(fds) != 0) return {ChildOutcome::Kind::Crashed, "pipe failed", 0, 0};
  const std::size_t limit = currentAddressSpaceBytes() + extraBytes;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    at::set_num_threads(1);  // parallel_for runs inline: no pool threads in a forked child
    struct rlimit rl {
      limit, limit
    };
    ::setrlimit(RLIMIT_AS, &rl);
    char tag = 'R';
    std::string text;
    try {
      text = body();
    } catch (const strata::Error& e) {
      tag = 'T';
      text = e.what();
    } catch (const std::exception& e) {
      tag = 'O';
      text = e.what();
    } catch (...) {
      tag = 'O';
      text = "an exception that is not a std::exception";
    }
    const std::string out = tag + text;
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);  // no destructors, no atexit handlers of the parent's state
  }
  ::close(fds[1]);
  ChildOutcome r;
  std::string got;
  bool killed = false;
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int waitMs = static_cast<int>(std::max(0.0, seconds - elapsed) * 1000) + 1;
    struct pollfd p {
      fds[0], POLLIN, 0
    };
    const int ready = ::poll(&p, 1, waitMs);
    if (ready > 0) {
      char buffer[4096];
      const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
      if (n > 0) {
        got.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      break;  // EOF: the child closed its end (exited or died)
    }
    if (ready == 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (killed) {
    r.kind = ChildOutcome::Kind::TimedOut;
  } else if (WIFSIGNALED(status)) {
    r.kind = ChildOutcome::Kind::Crashed;
    r.signal = WTERMSIG(status);
  } else if (got.empty()) {
    r.kind = ChildOutcome::Kind::Crashed;
    r.text = "the child exited with " + std::to_string(WEXITSTATUS(status)) + " and said nothing";
  } else {
    r.kind = got[0] == 'R'   ? ChildOutcome::Kind::Returned
             : got[0] == 'T' ? ChildOutcome::Kind::TypedError
                             : ChildOutcome::Kind::OtherError;
    r.text = got.substr(1);
  }
  return r;
}

}  // namespace strata::test
