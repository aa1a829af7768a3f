#include "text/JsonFile.h"

#include "common/Error.h"
#include "io/JsonFile.h"

namespace strata::text {

nlohmann::json readJsonFile(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw IoError(path.string() + ": file not found");
  return io::readJsonFile(path);  // size cap, depth check, IoError naming the file and byte
}

}  // namespace strata::text

namespace strata::text {

int tokenIdOf(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer()) throw IoError(where + ": the id is not an integer (got " + v.dump() + ")");
  // Compared as a signed or unsigned 64-bit value before narrowing, so 2^32 is not read as 0.
  const bool inRange = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxTokenId)
                                              : v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= kMaxTokenId;
  if (!inRange)
    throw IoError(where + ": the id " + v.dump() + " is out of range (0 to " + std::to_string(kMaxTokenId) +
                  "; no vocabulary is that large)");
  return v.get<int>();
}

}  // namespace strata::text
