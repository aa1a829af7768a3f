#include "io/CheckpointGuard.h"

#include <array>
#include <cstring>
#include <sys/stat.h>

#include "common/Error.h"
#include "common/Text.h"
#include "io/FileBytes.h"

namespace strata::io {
namespace {

constexpr std::array<const char*, 6> kPickleExtensions = {".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle"};

std::string advice(const std::filesystem::path& path, const std::string& what) {
  return "'" + path.string() + "' " + what +
         ": loading a pickle can run arbitrary code, so Strata never reads one; "
         "convert it to .safetensors and use that file";
}

}  // namespace

std::optional<std::string> unsafeCheckpointReason(const std::filesystem::path& path) {
  const std::string ext = toLowerAscii(path.extension().string());
  for (const char* bad : kPickleExtensions)
    if (ext == bad) return advice(path, "is a pickle checkpoint (" + ext + ")");

  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::string bytes;
  try {
    bytes = readFileBytes(path, 9);
  } catch (const IoError&) {
    return std::nullopt;  // unreadable: the opener reports that itself
  }
  std::array<unsigned char, 9> head{};
  std::memcpy(head.data(), bytes.data(), bytes.size());
  const std::size_t got = bytes.size();
  // A safetensors header always starts with '{' right after the length; this
  // keeps a length like 0x0280 (which begins 0x80 0x02) from looking like pickle.
  if (got == 9 && head[8] == '{') return std::nullopt;
  if (got >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4)
    return advice(path, "is a zip archive (the format torch.save writes), not a safetensors file");
  if (got >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
    return advice(path, "is a pickle stream (protocol " + std::to_string(head[1]) + "), not a safetensors file");
  return std::nullopt;
}

void refuseUnsafeCheckpoint(const std::filesystem::path& path) {
  if (auto reason = unsafeCheckpointReason(path)) throw IoError(*reason);
}

}  // namespace strata::io
