#include "io/JsonFile.h"

#include "common/Error.h"
#include "io/FileBytes.h"

namespace strata::io {

namespace {
template <class Json>
Json parseJsonFile(const std::filesystem::path& path) {
  const std::string text = readFileBytes(path);  // IoError naming the file
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    throw IoError(path.string() + ": not valid JSON: " + e.what());
  }
}
}  // namespace

nlohmann::json readJsonFile(const std::filesystem::path& path) { return parseJsonFile<nlohmann::json>(path); }

nlohmann::ordered_json readOrderedJsonFile(const std::filesystem::path& path) {
  return parseJsonFile<nlohmann::ordered_json>(path);
}

}  // namespace strata::io
