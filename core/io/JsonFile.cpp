#include "io/JsonFile.h"

#include "common/Error.h"
#include "io/FileBytes.h"

namespace strata::io {

void checkJsonDepth(const std::string& text, const std::string& source) {
  int depth = 0;
  bool inString = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw IoError(source + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (at byte " +
                      std::to_string(i) + "); no file Strata reads nests that deep");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;  // an unbalanced close is the parser's to report
    }
  }
}

namespace {

template <class Json>
Json parseText(const std::string& text, const std::string& source) {
  checkJsonDepth(text, source);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError(source + ": not valid JSON (byte " + std::to_string(e.byte) + " of " + std::to_string(text.size()) +
                  "): " + e.what());
  } catch (const std::exception& e) {
    throw IoError(source + ": not valid JSON: " + e.what());
  }
}

template <class Json>
Json parseJsonFile(const std::filesystem::path& path, std::size_t limitBytes) {
  const std::string text = readSmallFile(path, limitBytes, "JSON file");  // IoError naming the file
  return parseText<Json>(text, path.string());
}

}  // namespace

nlohmann::json parseJsonText(const std::string& text, const std::string& source) {
  return parseText<nlohmann::json>(text, source);
}

nlohmann::json readJsonFile(const std::filesystem::path& path, std::size_t limitBytes) {
  return parseJsonFile<nlohmann::json>(path, limitBytes);
}

nlohmann::ordered_json readOrderedJsonFile(const std::filesystem::path& path, std::size_t limitBytes) {
  return parseJsonFile<nlohmann::ordered_json>(path, limitBytes);
}

}  // namespace strata::io
