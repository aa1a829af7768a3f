#pragma once
// A JSON file (config.json, model_index.json, an index, adapter_config.json,
// tokenizer.json, state.json) read through the one file reader (io/FileBytes)
// and parsed. Every error names the file. The nesting depth is checked on the
// text before it is parsed: a tokenizer.json of 30,000 nested Sequences crashed
// the recursive builders that walk it (and took 18 s at 20,000).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <string>

#include "io/FileBytes.h"  // kMaxSmallFileBytes, for config.json readers

namespace strata::io {

// No file Strata reads nests deeper than ~8; 64 leaves room and keeps every
// recursive walk of the tree (builders, dump, copies) shallow.
constexpr int kMaxJsonDepth = 64;
// tokenizer.json files reach ~35 MB, shard indexes of the largest models ~10 MB.
constexpr std::size_t kMaxJsonFileBytes = std::size_t{256} << 20;

// Throws IoError "<source>: JSON nested deeper than 64 levels (at byte N)" when
// `text` opens more than kMaxJsonDepth arrays/objects at once (strings skipped).
void checkJsonDepth(const std::string& text, const std::string& source);

// Parses `text` after the depth check. IoError "<source>: not valid JSON (byte N
// of M): <parser's words>" when it does not parse.
nlohmann::json parseJsonText(const std::string& text, const std::string& source);

// Throws IoError "<path>: <why>" when the file cannot be read (missing, not a
// regular file, larger than `limitBytes`), and the errors of parseJsonText.
nlohmann::json readJsonFile(const std::filesystem::path& path, std::size_t limitBytes = kMaxJsonFileBytes);
// The same, keeping the file's key order (peft's adapter_config.json is written back).
nlohmann::ordered_json readOrderedJsonFile(const std::filesystem::path& path,
                                           std::size_t limitBytes = kMaxJsonFileBytes);

}  // namespace strata::io
