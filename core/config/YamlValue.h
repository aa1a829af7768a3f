#pragma once
// The YAML reader of core/config (internal; it exposes yaml-cpp, which the public
// config headers do not): one node to a schema Value, and the key walker that
// fills a LoadedConfig. The first layer of the one-way order
//   YamlValue  <-  AiToolkitImporter  <-  RunConfigYaml
// (the run-config YAML recognises and hands over ai-toolkit job files).
#include "config/ConfigSchema.h"
#include "config/LoadedConfig.h"

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

namespace strata::config {

// The node as `key`'s type, or nullopt with `error` set to "expected an integer,
// got 'abc'". Accepts what the key allows beyond its type (a scalar for a list
// with scalarAsList, "0,1,2,3" with commaString, null for nullable keys). Choice
// spellings are checked later by KeySpec::set.
std::optional<Value> valueFromYaml(const KeySpec& key, const YAML::Node& node, std::string& error);

// "a mapping", "a list", "'abc'" for messages; a long or binary scalar is
// quoted as a short excerpt with its length, never whole.
std::string describeNode(const YAML::Node& node);

// At most `maxChars` characters of `text` for a message, bytes outside
// printable ASCII as \xNN, with "... (N bytes)" when cut.
std::string excerpt(const std::string& text, size_t maxChars = 40);

}  // namespace strata::config

// ---- the key walker shared by the Strata loader and the ai-toolkit importer ----

namespace strata::config {

SourcePos posOf(const YAML::Node& node);  // 1-based from the node's Mark()

class YamlReader {
 public:
  explicit YamlReader(LoadedConfig& out) : out_(out) {}

  void problem(Severity severity, const std::string& key, const SourcePos& pos, const std::string& message,
               const std::string& hint = "");

  // Converts `value` for `spec` and stores it; a wrong type or choice becomes an
  // error at `pos`. `concretePath` is "train.lr" or "datasets[2].folder_path".
  void apply(const KeySpec& spec, size_t datasetIndex, const std::string& concretePath, const YAML::Node& value,
             const SourcePos& pos);

  // Reads a mapping whose keys are under `patternPrefix` ("", "train.",
  // "datasets[].") / `concretePrefix` ("", "train.", "datasets[0]."). Unknown keys
  // become warnings with the nearest known key.
  void readMap(const YAML::Node& map, const std::string& patternPrefix, const std::string& concretePrefix,
               size_t datasetIndex);

  // Reads the `datasets` list.
  void readDatasets(const YAML::Node& list, const SourcePos& pos);

  // "did you mean 'train.lr'?" for an unknown concrete path, or "".
  static std::string suggestKey(const std::string& patternPath);

  // Unknown keys beyond the first kListedUnknownKeys get no warning each;
  // this many were left out (one summary warning says so).
  static constexpr size_t kListedUnknownKeys = 20;
  size_t unknownKeysLeftOut() const {
    return unknownKeys_ > kListedUnknownKeys ? unknownKeys_ - kListedUnknownKeys : 0;
  }

 private:
  LoadedConfig& out_;
  size_t unknownKeys_ = 0;
};

}  // namespace strata::config
