#include "train/RunFolderLock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace strata::train {

namespace fs = std::filesystem;

namespace {

pid_t readPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  const long v = std::strtol(buf, nullptr, 10);
  return v > 0 ? static_cast<pid_t>(v) : 0;
}

}  // namespace

RunFolderBusy::RunFolderBusy(const fs::path& dir, pid_t holder)
    : IoError("run folder " + dir.string() + " is in use by process " +
              (holder > 0 ? std::to_string(holder) : std::string("(pid unknown)")) +
              " (a strata-train run or resume, or the app); wait for it to end or stop it first"),
      holder_(holder) {}

RunFolderLock::RunFolderLock(const fs::path& dir) : dir_(dir) {
  std::error_code ec;
  createdDir_ = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the run folder: " + ec.message());
  const fs::path path = lockPath(dir);
  // The lock file is never removed, so the inode a process locks is the one
  // every other process opens.
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw IoError(path.string() + ": cannot open the run folder's lock file: " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const pid_t holder = err == EWOULDBLOCK ? readPid(fd) : 0;
      ::close(fd);
      if (err == EWOULDBLOCK) throw RunFolderBusy(dir, holder);
      if (err == EINTR) continue;
      throw IoError(path.string() + ": cannot lock: " + std::strerror(err));
    }
    // Someone replaced the file between our open and flock: lock the new one.
    struct stat mine {
    }, now{};
    if (::fstat(fd, &mine) != 0 || ::stat(path.c_str(), &now) != 0 || mine.st_ino != now.st_ino) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int err = errno;
      ::close(fd);
      throw IoError(path.string() + ": cannot write the lock file: " + std::strerror(err));
    }
    fd_ = fd;
    return;
  }
}

RunFolderLock::~RunFolderLock() { release(); }

RunFolderLock::RunFolderLock(RunFolderLock&& o) noexcept
    : dir_(std::move(o.dir_)), fd_(o.fd_), createdDir_(o.createdDir_) {
  o.fd_ = -1;
}

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& o) noexcept {
  if (this != &o) {
    release();
    dir_ = std::move(o.dir_);
    fd_ = o.fd_;
    createdDir_ = o.createdDir_;
    o.fd_ = -1;
  }
  return *this;
}

void RunFolderLock::release() {
  if (fd_ < 0) return;
  // Clear the pid first so a reader never names a process that is gone.
  if (::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);  // drops the flock
  fd_ = -1;
}

void RunFolderLock::releaseAndRemoveIfEmpty() {
  if (fd_ < 0) return;
  std::error_code ec;
  bool onlyLock = createdDir_;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.path().filename() != ".lock") onlyLock = false;
  if (!ec && onlyLock) {
    ::unlink(lockPath(dir_).c_str());  // acquirers re-check the inode they locked
    release();
    fs::remove(dir_, ec);
    return;
  }
  release();
}

pid_t RunFolderLock::holderOf(const fs::path& dir) {
  const int fd = ::open(lockPath(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  pid_t holder = 0;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    holder = readPid(fd);
  else
    ::flock(fd, LOCK_UN);
  ::close(fd);
  return holder;
}

}  // namespace strata::train
