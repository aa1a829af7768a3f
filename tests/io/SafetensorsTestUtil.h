#pragma once
// Helpers shared by the safetensors tests: raw files built byte by byte.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace strata::test {

// 8-byte little-endian length + header + data, the header taken as given.
inline std::string safetensorsBytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + header + data;
}

inline void writeRaw(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string readRaw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace strata::test
