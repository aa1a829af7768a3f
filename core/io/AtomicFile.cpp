#include "io/AtomicFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "common/Error.h"

namespace strata::io {
namespace {

std::string osError(int err) { return std::strerror(err); }

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what, int err) {
  throw IoError("cannot write '" + path.string() + "': " + what + ": " + osError(err));
}

// Owns the temp file until it is renamed; removes it otherwise.
class TempFile {
 public:
  explicit TempFile(const std::filesystem::path& target) : target_(target) {
    std::filesystem::path folder = target.parent_path();
    if (folder.empty()) folder = ".";
    std::string pattern = (folder / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0) fail(target_, "cannot create a temp file in '" + folder.string() + "'", errno);
    tempPath_ = pattern;
    // mkstemp creates 0600; give the file the permissions a plain open() would.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd_, 0666 & ~mask);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tempPath_.empty()) ::unlink(tempPath_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t sizeBytes) {
    const char* p = static_cast<const char*>(data);
    while (sizeBytes > 0) {
      const ssize_t n = ::write(fd_, p, sizeBytes);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(target_, "write to temp file '" + tempPath_ + "' failed", errno);
      }
      p += n;
      sizeBytes -= static_cast<std::size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail(target_, "fsync of temp file failed", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(target_, "close of temp file failed", errno);
    if (::rename(tempPath_.c_str(), target_.c_str()) != 0) fail(target_, "rename of temp file failed", errno);
    tempPath_.clear();
    // Make the rename itself durable; a failure here does not undo the write.
    std::filesystem::path folder = target_.parent_path();
    if (folder.empty()) folder = ".";
    const int dirFd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
    if (dirFd >= 0) {
      ::fsync(dirFd);
      ::close(dirFd);
    }
  }

 private:
  std::filesystem::path target_;
  std::string tempPath_;
  int fd_ = -1;
};

}  // namespace

void writeFileAtomic(const std::filesystem::path& path, const std::string& bytes) {
  TempFile temp(path);
  temp.write(bytes.data(), bytes.size());
  temp.commit();
}

void writeFileAtomicStream(const std::filesystem::path& path,
                           const std::function<void(const ByteSink& write)>& produce) {
  TempFile temp(path);
  const ByteSink sink = [&temp](const void* data, std::size_t sizeBytes) { temp.write(data, sizeBytes); };
  produce(sink);
  temp.commit();
}

}  // namespace strata::io
