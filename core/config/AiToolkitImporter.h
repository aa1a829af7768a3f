#pragma once
// Import of an ai-toolkit job file (`job: extension`, `config.process[0]` with
// network / train / model / datasets / sample / save) into a RunConfig. Keys that
// mean the same thing in Strata are taken over (with their line numbers); every
// key Strata does not use is reported with the reason, none is dropped silently.
#include "config/LoadedConfig.h"
#include "config/Problem.h"

#include <filesystem>
#include <string>
#include <vector>

namespace YAML {
class Node;  // yaml-cpp, for the two calls of RunConfigYaml.cpp below
}

namespace strata::config {

struct UnusedKey {
  std::string key;  // ai-toolkit path: "config.process[0].train.noise_scheduler"
  SourcePos pos;
  std::string reason;  // "Strata always trains with flow matching"
};

struct ImportResult {
  LoadedConfig loaded;  // the RunConfig; problems include one warning per unused key
  std::vector<UnusedKey> unused;
};

// Imports YAML text / a file. A text that is not an ai-toolkit job gives an error
// Problem. loadRunConfig() also recognises job files and imports them.
ImportResult importAiToolkit(const std::string& yamlText, const std::string& fileName = "<string>");
// Throws strata::IoError when the file cannot be read.
ImportResult importAiToolkitFile(const std::filesystem::path& path);

// For parseRunConfig, which has parsed the document already: true for an
// ai-toolkit job (`job:` a plain string, `config:` a mapping), and its import
// into `out`.
bool isAiToolkitJob(const YAML::Node& root);
void importAiToolkitRoot(const YAML::Node& root, LoadedConfig& out, std::vector<UnusedKey>& unused);

}  // namespace strata::config
