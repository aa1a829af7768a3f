#pragma once
// Content hashes: XXH64 (the xxHash 64-bit algorithm, seed 0 unless given),
// fast enough to hash model weights (several GB/s), for cache keys and the
// checksums cache files carry. Not a cryptographic hash.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace strata::io {

class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(const void* data, std::size_t sizeBytes);
  std::uint64_t digest() const;

 private:
  std::uint64_t v_[4];
  std::uint64_t seed_;
  std::uint64_t totalBytes_ = 0;
  unsigned char buffer_[32];
  std::size_t buffered_ = 0;
};

std::uint64_t xxh64(const void* data, std::size_t sizeBytes, std::uint64_t seed = 0);
// 16 lowercase hex digits.
std::string hashHex(std::uint64_t hash);
// hashHex(xxh64(bytes)).
std::string contentHashHex(const std::string& bytes);

// The XXH64 of a file's content (hex), read in chunks. The result is remembered
// by the file's device, inode, size, mtime and ctime: in this process and in
// $XDG_CACHE_HOME/strata/content-hashes.json (~/.cache/strata/...; best effort,
// a memo that cannot be written is not an error), so multi-GB weights are read
// once. ctime cannot be set by a user (touch -r / utime set only mtime), so a file
// rewritten with the same size and mtime is hashed again. Throws IoError naming
// the file when it cannot be read.
std::string fileContentHash(const std::filesystem::path& path);

// What identifies weights in a cache key: fileContentHash of a file, or of every
// file directly in a folder (with its name), "[name:hash;...]". Replaced weights
// change it even when their size and date were kept; moving or touching them
// does not. A file that cannot be read is named in it ("unreadable <path>"): the
// load that needs it says why.
std::string weightsStamp(const std::filesystem::path& fileOrFolder);

}  // namespace strata::io
