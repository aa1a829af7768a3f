#pragma once
// Reading and writing RunConfig as YAML. Reading never throws for bad content:
// every problem (syntax, wrong type, unknown key) comes back with its line, and
// the config holds the defaults where a key could not be read. Only a file that
// cannot be read at all throws.
#include "config/LoadedConfig.h"
#include "config/Problem.h"
#include "config/RunConfig.h"

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::config {

// Parses YAML text. `fileName` goes into SourceMap::file and each Problem. An
// ai-toolkit job file is recognised and imported (see AiToolkitImporter.h).
LoadedConfig parseRunConfig(const std::string& yamlText, const std::string& fileName = "<string>");

// Reads and parses a file. Throws strata::IoError (naming the path and the OS
// reason: missing, a symlink loop, ...) when the file is missing, unreadable or
// larger than kMaxConfigBytes; everything else is reported in `problems`.
constexpr size_t kMaxConfigBytes = 1 << 20;
LoadedConfig loadRunConfig(const std::filesystem::path& path);

// The whole config as YAML (every key, schema order; unset optional keys left
// out). parseRunConfig(toYaml(c)).config == c.
std::string toYaml(const RunConfig& cfg);

// Writes toYaml(cfg) atomically (temp file + rename). Throws strata::IoError.
void saveRunConfig(const RunConfig& cfg, const std::filesystem::path& path);

// Applies "key=value" overrides (the CLI's --set) on top of a loaded config. Each
// bad override (unknown key, wrong type, no '=') becomes an error Problem whose
// file is "--set <text>"; overridden keys get that origin in `loaded.where`.
// Parses `text` as YAML for that key's type ("1e-4", "[0,1]", "0,1,2,3") and sets
// it; string, path and choice keys take `text` verbatim ("bf16", "a: b").
// Throws ConfigError naming the key and what was expected.
void setValueText(RunConfig& cfg, std::string_view path, const std::string& text);

void applyOverrides(LoadedConfig& loaded, const std::vector<std::string>& assignments);

}  // namespace strata::config
