#include "io/FileBytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/Error.h"

namespace strata::io {

namespace {

// What a non-regular file is, in words.
const char* kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading without blocking on a FIFO and refuses anything but a
// regular file; `size` gets its size. The descriptor is back in blocking mode.
int openRegular(const std::filesystem::path& path, off_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw IoError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(path.string() + ": cannot read its status: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) throw IoError(path.string() + ": is a folder, not a file");
    throw IoError(path.string() + ": is " + kindOf(st.st_mode) +
                  ", not a regular file; Strata reads only regular files");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size = st.st_size;
  return fd;
}

// Reads up to `maxBytes` from an open descriptor and closes it.
std::string readOpened(int fd, const std::filesystem::path& path, off_t size, std::size_t maxBytes) {
  std::string out;
  if (size > 0) out.reserve(std::min<std::size_t>(static_cast<std::size_t>(size), maxBytes));
  char buffer[1 << 16];
  while (out.size() < maxBytes) {
    const ssize_t n = ::read(fd, buffer, std::min(sizeof buffer, maxBytes - out.size()));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError(path.string() + ": read failed: " + std::strerror(err));
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string readFileBytes(const std::filesystem::path& path, std::size_t maxBytes) {
  off_t size = 0;
  const int fd = openRegular(path, size);
  return readOpened(fd, path, size, maxBytes);
}

std::string byteSizeText(std::size_t bytes) {
  constexpr std::size_t kMb = std::size_t{1} << 20;
  if (bytes >= kMb && bytes % kMb == 0) return std::to_string(bytes / kMb) + " MB";
  return std::to_string(bytes) + " bytes";
}

std::string readSmallFile(const std::filesystem::path& path, std::size_t limitBytes, const std::string& what) {
  off_t size = 0;
  const int fd = openRegular(path, size);  // refuses a FIFO or device before anything else
  auto tooLarge = [&](const std::string& size) {
    return IoError(path.string() + ": " + size + ", more than the " + byteSizeText(limitBytes) + " a " + what +
                   " may hold (is it the right file?)");
  };
  if (static_cast<std::size_t>(size) > limitBytes) {
    ::close(fd);
    throw tooLarge(std::to_string(size) + " bytes");
  }
  // One byte more than the cap: a file that grew between the stat and the read.
  std::string text = readOpened(fd, path, size, limitBytes + 1);
  if (text.size() > limitBytes) throw tooLarge("more than " + std::to_string(limitBytes) + " bytes");
  return text;
}

std::string pathProblem(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return "";
  const int err = errno;
  switch (err) {
    case ENOENT:
      return "no such file or folder";
    case ELOOP:
      return "a loop of symbolic links";
    case ENOTDIR:
      return "a part of the path is not a folder";
    case EACCES:
      return "permission denied";
    case ENAMETOOLONG:
      return "the path is too long";
    default:
      return std::strerror(err);
  }
}

}  // namespace strata::io
