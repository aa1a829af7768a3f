#pragma once
// safetensors reader (memory-mapped, header validated completely) and writer
// (atomic). Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data area; offsets are relative to the start of the data area.
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::io {

// The element types this reader knows. F8_* parse everywhere (so shapes can be
// read) but become tensors only where LibTorch has float8 (compat::kHasFloat8).
enum class SafetensorsDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

std::string_view dtypeName(SafetensorsDtype dtype);  // "F32", ...
std::size_t dtypeSizeBytes(SafetensorsDtype dtype);
std::optional<SafetensorsDtype> dtypeFromName(std::string_view name);
// Throws IoError for F8_* where LibTorch has no float8.
at::ScalarType toScalarType(SafetensorsDtype dtype);
// Throws IoError for a scalar type safetensors cannot store here (complex, ...).
SafetensorsDtype fromScalarType(at::ScalarType type);

// Header sanity bound: larger headers are refused before any parsing.
constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// More dimensions than this is treated as a corrupt header.
constexpr std::size_t kMaxRank = 16;

struct TensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::int64_t> shape;  // empty for a scalar
  std::uint64_t beginBytes = 0;     // span in the data area: [beginBytes, endBytes)
  std::uint64_t endBytes = 0;

  std::uint64_t sizeBytes() const { return endBytes - beginBytes; }
  std::int64_t numel() const;
};

struct SafetensorsHeader {
  std::uint64_t headerSizeBytes = 0;  // N, the JSON length (spaces included)
  std::uint64_t dataOffsetBytes = 0;  // 8 + N: where the data area starts in the file
  std::uint64_t dataSizeBytes = 0;    // file size - dataOffsetBytes
  std::map<std::string, std::string> metadata;
  std::map<std::string, TensorInfo> tensors;
};

// Parses and validates the header of a whole safetensors file held in
// `bytes[0, sizeBytes)` (only the first 8 + N bytes are read; sizeBytes bounds
// the data area). Throws IoError naming `sourceName` and the tensor/field.
SafetensorsHeader parseSafetensorsHeader(const std::uint8_t* bytes, std::size_t sizeBytes,
                                         const std::string& sourceName);

class SafetensorsFile {
 public:
  // Maps the file and validates its header. Refuses pickle checkpoints first
  // (refuseUnsafeCheckpoint, io/CheckpointGuard.h). Throws IoError.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  const std::map<std::string, std::string>& metadata() const;
  const SafetensorsHeader& header() const;
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  // Dtype, shape and span without touching the data. Throws IoError if absent.
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor over the mapping, without a copy where the data is aligned for
  // its dtype (it keeps the mapping alive). The mapping is private copy-on-write:
  // writing into the tensor never changes the file. Throws IoError.
  at::Tensor tensor(const std::string& name) const;
  // A CPU tensor that owns its memory (independent of the mapping).
  at::Tensor tensorCopy(const std::string& name) const;
  // Gives the mapped pages under tensor `name` back to the kernel (MADV_PAGEOUT),
  // so a loader that copied the tensor out does not keep the file resident: read
  // pages otherwise stay in the process's RSS until the file is closed. Pages
  // written through a tensor are paged out, not dropped, so nothing is lost; a
  // later read faults them in again. Best effort: a no-op where the kernel lacks it.
  void releasePages(const std::string& name) const;
  // The whole mapped file (for checks that a tensor really is zero-copy).
  const std::uint8_t* mappedBytes() const;
  std::size_t mappedSizeBytes() const;

  struct Mapping;  // the mmap region; shared by the file and its tensors

 private:
  SafetensorsFile() = default;
  std::shared_ptr<const Mapping> mapping_;
  std::shared_ptr<const SafetensorsHeader> header_;
  std::filesystem::path path_;
};

// Writes `tensors` (moved to CPU, contiguous, one at a time) and `metadata`
// atomically. Header keys are sorted, the header is padded with spaces to 8
// bytes, and every tensor starts aligned to its element size. Throws IoError on
// duplicate or reserved names, unsupported dtypes or a failed write.
void writeSafetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Every tensor of the file, keyed by name (zero-copy where possible).
std::map<std::string, at::Tensor> loadSafetensors(const std::filesystem::path& path);

}  // namespace strata::io
