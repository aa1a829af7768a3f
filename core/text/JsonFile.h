#pragma once
// Reads a JSON file for the tokenizers, with IoError naming the file on a missing
// file or a parse error (with the byte where it failed).
#include <filesystem>
#include <nlohmann/json.hpp>

namespace strata::text {

nlohmann::json readJsonFile(const std::filesystem::path& path);

}  // namespace strata::text
