#pragma once
// The schema of RunConfig: one entry per YAML key with its type, default, unit,
// one-line doc, range or choices, and accessors into the struct. The loader, the
// saver, the validator's range checks and the UI's form all iterate this one
// table, so a key cannot exist in one of them and not in the others.
//
// Key paths: "train.lr", "train.ema_config.use_ema", and for dataset entries the
// pattern "datasets[].folder_path" (schema) or a concrete "datasets[0].folder_path"
// (getValue / setValue).
#include "config/RunConfig.h"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace strata::config {

enum class KeyType {
  Bool,
  Int,
  Float,
  String,
  Path,    // a string naming a file or folder
  Choice,  // a string from `choices`
  IntList,
  FloatList,
  StringList,
  ChoiceList,  // strings, each from `choices`
};

// "bool", "int", "float", "string", "path", "choice", "int list", ...
std::string keyTypeName(KeyType type);

// What a Path key names, so a form offers the right chooser.
enum class PathKind {
  None,          // not a path key
  File,          // an existing file
  Folder,        // a folder (created when missing where the key says so)
  FileOrFolder,  // either (a diffusers folder or one .safetensors file)
  SaveFile,      // a file to be written
};

// A key's value in a type-neutral form (Value) is in config/RunConfig.h.

struct KeySpec {
  std::string path;  // "train.lr", "datasets[].folder_path"
  KeyType type = KeyType::String;
  Value defaultValue;         // from a default-constructed RunConfig / DatasetConfig
  std::string unit;           // "steps", "GB", "pixels", ... or empty
  std::string doc;            // one line for a tooltip (the FLUX.1 words where families differ)
  std::optional<double> min;  // numbers and number lists (each element)
  std::optional<double> max;
  bool minExclusive = false;         // (min, ...] rather than [min, ...]
  std::vector<std::string> choices;  // Choice / ChoiceList
  bool nullable = false;             // may be unset (architecture overrides)
  bool scalarAsList = false;         // a list key that also accepts one scalar ("16" -> [16])
  bool commaString = false;          // a list key that also accepts "0,1,2,3" (gpu_ids)
  std::optional<size_t> listSize;    // fixed element count (betas: 2)
  // A further rule on the value (job.name: a folder name); the problem, or "".
  std::function<std::string(const Value&)> check;

  PathKind pathKind = PathKind::None;  // Path keys: a file, a folder, either, or a file to write

  // How a form shows the key: user words for its label (the path goes in the
  // tooltip), the group it sits in, and whether it is one of the few settings
  // on the Basic page (the rest are Advanced). `modelShape`: an architecture
  // override, only of interest for a custom model.
  std::string label;  // "Rank"
  std::string group;  // "LoRA"
  bool basic = false;
  bool modelShape = false;
  // The model families that read the key (their model.arch ids): the family that
  // contributes the row and those that say they read it too
  // (config/FamilyRegistry.h); empty = every family (a row of the shared table).
  std::vector<std::string> families;
  bool appliesTo(const std::string& family) const;
  // A key a family does not read whose value is not called ignored there
  // (model.is_flux: false is what a llama config means).
  bool quietElsewhere = false;
  // Dataset keys: the dataset types that read the key (datasets[].type); empty =
  // every type. A form hides the others' keys (unless set away from the default).
  std::vector<DatasetType> datasetTypes;
  bool appliesToDataset(DatasetType type) const;
  // A key every family reads but whose files or values differ by family
  // (model.name_or_path: a FLUX checkpoint, a causal LM's folder) has its doc per
  // family; docFor gives that one, else `doc`.
  std::vector<std::pair<std::string, std::string>> familyDocs;
  const std::string& docFor(const std::string& family) const;

  std::function<Value(const RunConfig&, size_t datasetIndex)> get;
  // Throws ConfigError when `value` does not hold this key's type.
  std::function<void(RunConfig&, size_t datasetIndex, const Value&)> set;

  bool isDatasetKey() const { return path.rfind("datasets[].", 0) == 0; }
  // "[1e-06, 1]" / "(0, 1]" / "one of: a, b" / "" for the UI and hints.
  std::string rangeText() const;
};

// Every key, in the order the saver writes them: the shared table's rows with the
// registered families' rows (config/FamilyRegistry.h) each after the key it names.
// Built again after a family is registered; an earlier table stays valid.
const std::vector<KeySpec>& schema();

// The shared table alone: the keys every family reads, in the saver's order.
std::vector<KeySpec> sharedKeyRows();

// Form groups in display order ("Run", "Model", ...); every key's group is one of them.
const std::vector<std::string>& keyGroups();

// The entry for "train.lr", "datasets[].x" or "datasets[3].x"; nullptr if unknown.
const KeySpec* findKey(std::string_view path);

// Splits "datasets[3].folder_path" into the pattern "datasets[].folder_path" and
// index 3; other paths come back unchanged with index 0.
std::pair<std::string, size_t> splitDatasetPath(std::string_view path);

// Generic access by concrete path. Throw ConfigError for an unknown key, a wrong
// value type or a dataset index out of range (setValue may append: index == size).
Value getValue(const RunConfig& cfg, std::string_view path);
void setValue(RunConfig& cfg, std::string_view path, const Value& value);

// The same as YAML text: "0.0001", "true", "[0, 1]", "flux-dev", "" for unset.
std::string getValueText(const RunConfig& cfg, std::string_view path);
// setValueText (a value typed as text, read as YAML) is in config/RunConfigYaml.h.

// A value as YAML flow text (the form getValueText returns).
std::string formatValue(const Value& value);

// The shortest decimal text that reads back as exactly `v` ("0.0001", "1e-08").
std::string formatDouble(double v);

// A number for messages: "1024", "0.0001" (integers without ".0").
std::string formatNumber(double v);

// Why `name` cannot name a run (its folder and its LoRA files), or "" when it
// can: not empty, one path component (no '/', not "." or ".."), valid UTF-8
// with no control characters, at most kMaxRunNameBytes bytes.
constexpr size_t kMaxRunNameBytes = 200;
std::string runNameProblem(const std::string& name);

// Levenshtein distance, for "did you mean" hints.
size_t editDistance(std::string_view a, std::string_view b);

}  // namespace strata::config
