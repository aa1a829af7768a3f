#pragma once
// Starts the built strata-train (or another program) as a child process (fork + exec, no shell), so
// a test can signal it, kill it at a chosen moment, or give it a file-size
// limit (RLIMIT_FSIZE with SIGXFSZ ignored: writes past it fail with EFBIG, as
// a full disk fails with ENOSPC).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata::test::cli {

// The binary sits in <build>/app/, the tests in <build>/tests/.
inline std::filesystem::path strataTrainPath() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return self.parent_path().parent_path() / "app" / "strata-train";
}

inline std::string readAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Child {
 public:
  // Runs the built strata-train with `args`; stdout and stderr go to `logFile`.
  // `fileSizeLimit` > 0 sets RLIMIT_FSIZE in the child.
  Child(const std::vector<std::string>& args, const std::filesystem::path& logFile, rlim_t fileSizeLimit = 0)
      : Child(strataTrainPath(), args, logFile, fileSizeLimit) {}
  // The same with another program (an installed strata-train).
  Child(const std::filesystem::path& program, const std::vector<std::string>& args,
        const std::filesystem::path& logFile, rlim_t fileSizeLimit = 0)
      : log_(logFile) {
    const std::string exe = program.string();
    std::vector<std::string> all = {exe};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string logPath = logFile.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls until exec.
      const int fd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
      if (fileSizeLimit > 0) {
        // As a shell's `ulimit -f`: SIGXFSZ keeps its default action (the program must handle it).
        ::signal(SIGXFSZ, SIG_DFL);
        rlimit r{};
        ::getrlimit(RLIMIT_FSIZE, &r);
        r.rlim_cur = fileSizeLimit;
        ::setrlimit(RLIMIT_FSIZE, &r);
      }
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }

  // True once the child has ended (reaped).
  bool poll() {
    if (done_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) finish(status);
    return done_;
  }
  // Waits for the end; the exit code, or 128 + signal.
  int wait() {
    if (!done_) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      finish(status);
    }
    return code_;
  }
  // Waits up to `timeout`; false when it is still running.
  bool waitFor(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!poll()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  int exitCode() const { return code_; }
  bool killedBy(int sig) const { return signaled_ == sig; }
  std::string output() const { return readAll(log_); }

 private:
  void finish(int status) {
    done_ = true;
    if (WIFEXITED(status)) code_ = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
      signaled_ = WTERMSIG(status);
      code_ = 128 + signaled_;
    }
  }
  std::filesystem::path log_;
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  int signaled_ = 0;
};

// Runs `program` to the end; returns the exit code, `output` gets stdout + stderr.
inline int runProgram(const std::filesystem::path& program, const std::vector<std::string>& args,
                      const std::filesystem::path& logFile, std::string* output = nullptr) {
  Child c(program, args, logFile);
  const int code = c.wait();
  if (output) *output = c.output();
  return code;
}

// Runs to the end; returns the exit code, `output` gets stdout + stderr.
inline int runStrataTrain(const std::vector<std::string>& args, const std::filesystem::path& logFile,
                          std::string* output = nullptr, rlim_t fileSizeLimit = 0) {
  Child c(args, logFile, fileSizeLimit);
  const int code = c.wait();
  if (output) *output = c.output();
  return code;
}

// Lines of a file that are not empty.
inline size_t lineCount(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line))
    if (!line.empty()) ++n;
  return n;
}

// The tiny FLUX-architecture model on CPU: a run config for the CLI tests.
inline std::string tinyRunYaml(const std::string& trainingFolder, int64_t steps, int64_t saveEvery,
                               const std::string& name = "tiny", int64_t keep = 3) {
  std::ostringstream y;
  y << "job:\n  name: " << name << "\n  training_folder: \"" << trainingFolder << "\"\n"
    << "model:\n  preset: tiny\n  random_weights: true\n  device: cpu\n"
    << "network:\n  linear: 4\n  linear_alpha: 4\n"
    << "train:\n  steps: " << steps << "\n  batch_size: 1\n  lr: 0.002\n  dtype: fp32\n  seed: 3\n"
    << "  lr_scheduler: cosine\n  lr_warmup_steps: 2\n"
    << "  ema_config:\n    use_ema: true\n    ema_decay: 0.9\n"
    << "datasets:\n  - type: shapes\n    resolution: [16]\n    num_items: 8\n"
    << "sample:\n  sample_every: 0\n  prompts: []\n"
    << "save:\n  save_every: " << saveEvery << "\n  max_step_saves_to_keep: " << keep
    << "\n  dtype: fp32\n  export_formats: [diffusers]\n";
  return y.str();
}

// A data-parallel launcher's child whose environment has RANK=`rank` (strata-train
// --nproc's ranks), or -1.
inline pid_t rankPid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  pid_t pid = 0;
  while (children >> pid) {
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var == "RANK=" + std::to_string(rank)) return pid;
  }
  return -1;
}

}  // namespace strata::test::cli
