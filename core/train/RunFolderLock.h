#pragma once
// One process per run folder. `run`, `resume` and the app's trainer take an
// exclusive flock on <run folder>/.lock (the file holds the holder's pid), so two
// runs never write into one folder and a resume never truncates a live run's
// logs. The kernel drops the lock when its holder dies (even by SIGKILL), so a
// lock file left by a dead process is simply taken over.
#include <sys/types.h>

#include <filesystem>
#include <string>

#include "common/Error.h"

namespace strata::train {

// The folder is locked by another live process.
class RunFolderBusy : public IoError {
 public:
  RunFolderBusy(const std::filesystem::path& dir, pid_t holder);
  pid_t holder() const { return holder_; }

 private:
  pid_t holder_;
};

class RunFolderLock {
 public:
  RunFolderLock() = default;
  // Creates `dir` if needed and locks it. Throws RunFolderBusy when another
  // process holds it, IoError when the lock file cannot be made.
  explicit RunFolderLock(const std::filesystem::path& dir);
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& o) noexcept;
  RunFolderLock& operator=(RunFolderLock&& o) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  bool held() const { return fd_ >= 0; }
  // Releases the lock; removes the folder when this lock created it and it holds
  // nothing but the lock file (a failed preflight leaves no empty folder behind).
  void releaseAndRemoveIfEmpty();
  const std::filesystem::path& dir() const { return dir_; }

  static std::filesystem::path lockPath(const std::filesystem::path& dir) { return dir / ".lock"; }
  // The pid of the live process holding `dir`, or 0 when none does.
  static pid_t holderOf(const std::filesystem::path& dir);

 private:
  void release();
  std::filesystem::path dir_;
  int fd_ = -1;
  bool createdDir_ = false;
};

}  // namespace strata::train
