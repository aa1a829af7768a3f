#include "io/ContentHash.h"

#include <algorithm>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"

namespace strata::io {
namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
// Little-endian loads (the hash is defined on little-endian words).
inline std::uint64_t read64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline std::uint32_t read32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline std::uint64_t round64(std::uint64_t acc, std::uint64_t input) {
  acc += input * kP2;
  acc = rotl(acc, 31);
  return acc * kP1;
}
inline std::uint64_t mergeRound(std::uint64_t acc, std::uint64_t val) {
  acc ^= round64(0, val);
  return acc * kP1 + kP4;
}

}  // namespace

Xxh64::Xxh64(std::uint64_t seed) : v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed) {}

void Xxh64::update(const void* data, std::size_t sizeBytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  totalBytes_ += sizeBytes;
  if (buffered_ + sizeBytes < 32) {
    std::memcpy(buffer_ + buffered_, p, sizeBytes);
    buffered_ += sizeBytes;
    return;
  }
  if (buffered_ > 0) {
    const std::size_t fill = 32 - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = round64(v_[i], read64(buffer_ + 8 * i));
    p += fill;
    sizeBytes -= fill;
    buffered_ = 0;
  }
  while (sizeBytes >= 32) {
    for (int i = 0; i < 4; ++i) v_[i] = round64(v_[i], read64(p + 8 * i));
    p += 32;
    sizeBytes -= 32;
  }
  std::memcpy(buffer_, p, sizeBytes);
  buffered_ = sizeBytes;
}

std::uint64_t Xxh64::digest() const {
  std::uint64_t h;
  if (totalBytes_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = mergeRound(h, v_[i]);
  } else {
    h = seed_ + kP5;
  }
  h += totalBytes_;
  const unsigned char* p = buffer_;
  std::size_t n = buffered_;
  while (n >= 8) {
    h ^= round64(0, read64(p));
    h = rotl(h, 27) * kP1 + kP4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= static_cast<std::uint64_t>(read32(p)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= (*p) * kP5;
    h = rotl(h, 11) * kP1;
    ++p;
    --n;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::uint64_t xxh64(const void* data, std::size_t sizeBytes, std::uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, sizeBytes);
  return h.digest();
}

std::string hashHex(std::uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

std::string contentHashHex(const std::string& bytes) { return hashHex(xxh64(bytes.data(), bytes.size())); }

namespace {

// What identifies one version of a file without reading it.
std::string statStamp(const struct stat& st) {
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

std::filesystem::path memoFile() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "strata" / "content-hashes.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "strata" / "content-hashes.json";
  return {};
}

constexpr std::size_t kMaxMemoBytes = 4u << 20;  // the memo holds a few hundred small rows

std::mutex& memoMutex() {
  static std::mutex m;
  return m;
}

// path -> {"stamp", "hash"}; an unreadable or malformed memo is an empty one.
nlohmann::json readMemo(const std::filesystem::path& file) {
  if (file.empty()) return nlohmann::json::object();
  try {
    auto j = nlohmann::json::parse(readFileBytes(file, kMaxMemoBytes));
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return nlohmann::json::object();
}

}  // namespace

std::string fileContentHash(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO in a model file's place must not hang the run's start (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw IoError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path.string() + ": not a regular file");
  }
  std::error_code ec;
  const std::string key = std::filesystem::absolute(path, ec).lexically_normal().string();
  const std::string stamp = statStamp(st);
  static std::map<std::string, std::pair<std::string, std::string>> seen;  // key -> (stamp, hash)
  const std::filesystem::path memo = memoFile();
  {
    std::lock_guard<std::mutex> lock(memoMutex());
    auto it = seen.find(key);
    if (it != seen.end() && it->second.first == stamp) {
      ::close(fd);
      return it->second.second;
    }
    const nlohmann::json j = readMemo(memo);
    auto row = j.find(key);
    if (row != j.end() && row->is_object() && row->value("stamp", "") == stamp && row->contains("hash") &&
        (*row)["hash"].is_string()) {
      ::close(fd);
      const std::string h = (*row)["hash"].get<std::string>();
      seen[key] = {stamp, h};
      return h;
    }
  }
  Xxh64 h;
  std::string buffer(1 << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError(path.string() + ": read failed: " + std::strerror(err));
    }
    h.update(buffer.data(), static_cast<std::size_t>(n));
  }
  // The file changed while it was read: the hash names no one version of it.
  struct stat after {};
  const bool stable = ::fstat(fd, &after) == 0 && statStamp(after) == stamp;
  ::close(fd);
  if (!stable) throw IoError(path.string() + ": changed while it was being read; try again when it is complete");
  const std::string hex = hashHex(h.digest());
  std::lock_guard<std::mutex> lock(memoMutex());
  seen[key] = {stamp, hex};
  if (!memo.empty()) {
    try {
      nlohmann::json j = readMemo(memo);  // again: another process may have added rows
      j[key] = {{"stamp", stamp}, {"hash", hex}};
      std::filesystem::create_directories(memo.parent_path(), ec);
      writeFileAtomic(memo, j.dump(1));
    } catch (const std::exception&) {
      // best effort: without the memo the file is hashed again next time
    }
  }
  return hex;
}

std::string weightsStamp(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  const bool folder = fs::is_directory(p, ec);
  if (folder) {
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(p);
  }
  std::string s = "[";
  for (const auto& f : files) {
    if (folder) s += f.filename().string() + ":";
    try {
      s += fileContentHash(f) + ";";
    } catch (const Error&) {
      s += "unreadable " + f.string() + ";";
    }
  }
  return s + "]";
}

}  // namespace strata::io
