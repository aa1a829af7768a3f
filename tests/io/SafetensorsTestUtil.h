#pragma once
// Helpers shared by the safetensors tests: raw files built byte by byte.
#include <cstdint>
#include <filesystem>
#include <string>

#include "io/AtomicFile.h"
#include "io/FileBytes.h"

namespace strata::test {

// 8-byte little-endian length + header + data, the header taken as given.
inline std::string safetensorsBytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + header + data;
}

// Through the io helpers rather than fstream: plain POSIX calls underneath.
inline void writeRaw(const std::filesystem::path& path, const std::string& bytes) { io::writeFileAtomic(path, bytes); }

inline std::string readRaw(const std::filesystem::path& path) { return io::readFileBytes(path); }

}  // namespace strata::test
