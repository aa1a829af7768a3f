#include "io/FileBytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/Error.h"

namespace strata::io {

std::string readFileBytes(const std::filesystem::path& path, std::size_t maxBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw IoError(path.string() + ": is a folder, not a file");
  }
  std::string out;
  if (st.st_size > 0) out.reserve(std::min<std::size_t>(static_cast<std::size_t>(st.st_size), maxBytes));
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
