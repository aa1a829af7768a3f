#pragma once
// A run config as read from YAML: the config, where each key was written, and
// the problems of reading. Filled by the YAML reader (YamlValue), for both
// Strata's files (RunConfigYaml) and ai-toolkit jobs (AiToolkitImporter).
#include <vector>

#include "config/Problem.h"
#include "config/RunConfig.h"

namespace strata::config {

struct LoadedConfig {
  RunConfig config;
  SourceMap where;                // line/column of every key that was written
  std::vector<Problem> problems;  // from reading only; run validate() for the rules
  bool fromAiToolkit = false;     // the file was an ai-toolkit job (`job: extension`)
  bool readable = true;           // false: syntax error, empty or not a mapping (config = defaults)
  bool ok() const { return !hasErrors(problems); }
};

}  // namespace strata::config
