#pragma once
// A JSON file (config.json, model_index.json, an index, adapter_config.json) read
// through the one file reader (io/FileBytes) and parsed. Every error names the file.
#include <nlohmann/json.hpp>

#include <filesystem>

namespace strata::io {

// Throws IoError "<path>: <why>" when the file cannot be read, and
// "<path>: not valid JSON: <parser's words>" when it does not parse.
nlohmann::json readJsonFile(const std::filesystem::path& path);
// The same, keeping the file's key order (peft's adapter_config.json is written back).
nlohmann::ordered_json readOrderedJsonFile(const std::filesystem::path& path);

}  // namespace strata::io
