#pragma once
// Reads a JSON file for the tokenizers, with IoError naming the file on a missing
// file or a parse error (with the byte where it failed), and the one check of a
// token id read from a file.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace strata::text {

nlohmann::json readJsonFile(const std::filesystem::path& path);

// The largest token id a file may name. Tables are sized by the largest id
// (id -> token), so an id of 1e9 asked for 32 GB; the largest vocabularies in
// use hold ~262k tokens.
constexpr int kMaxTokenId = (1 << 22) - 1;

// `v` as a token id: an integer in [0, kMaxTokenId]. IoError "<where>: ..."
// otherwise (where names the file and key).
int tokenIdOf(const nlohmann::json& v, const std::string& where);

}  // namespace strata::text
