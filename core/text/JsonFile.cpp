#include "text/JsonFile.h"

#include "common/Error.h"
#include "io/FileBytes.h"

namespace strata::text {

nlohmann::json readJsonFile(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw IoError(path.string() + ": file not found");
  const std::string bytes = io::readFileBytes(path);
  try {
    return nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError(path.string() + ": not valid JSON (byte " + std::to_string(e.byte) + " of " +
                  std::to_string(bytes.size()) + "): " + e.what());
  }
}

}  // namespace strata::text
