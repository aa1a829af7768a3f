#include "config/RunConfigYaml.h"

#include "common/Error.h"
#include "config/AiToolkitImporter.h"
#include "config/ConfigSchema.h"
#include "config/YamlValue.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

namespace strata::config {

SourcePos posOf(const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return {};
  return SourcePos{m.line + 1, m.column + 1, ""};
}

void YamlReader::problem(Severity severity, const std::string& key, const SourcePos& pos,
                         const std::string& message, const std::string& hint) {
  Problem p;
  p.severity = severity;
  p.key = key;
  p.file = pos.origin.empty() ? out_.where.file : pos.origin;
  p.line = pos.origin.empty() ? pos.line : 0;
  p.column = pos.origin.empty() ? pos.column : 0;
  p.message = message;
  p.hint = hint;
  out_.problems.push_back(std::move(p));
}

namespace {
std::string nearestChoice(const KeySpec& spec, const YAML::Node& value) {
  if (!value.IsScalar() || spec.choices.empty()) return "";
  std::string best;
  size_t bestD = 3;
  for (const auto& c : spec.choices) {
    const size_t d = editDistance(value.Scalar(), c);
    if (d < bestD) bestD = d, best = c;
  }
  return best;
}
}  // namespace

void YamlReader::apply(const KeySpec& spec, size_t datasetIndex, const std::string& concretePath,
                       const YAML::Node& value, const SourcePos& pos) {
  std::string error;
  std::optional<Value> v = valueFromYaml(spec, value, error);
  if (!v) {
    problem(Severity::Error, concretePath, pos, error, "type: " + keyTypeName(spec.type) +
                                                            (spec.rangeText().empty() ? "" : ", " + spec.rangeText()));
    return;
  }
  try {
    spec.set(out_.config, datasetIndex, *v);
  } catch (const ConfigError& e) {
    const std::string near = nearestChoice(spec, value);
    problem(Severity::Error, concretePath, pos, std::string(e.what()) + ", got " + describeNode(value),
            near.empty() ? "" : "did you mean '" + near + "'?");
  }
}

std::string YamlReader::suggestKey(const std::string& patternPath) {
  // Keys that live elsewhere in Strata than where people (and the seed report) write them.
  static const std::map<std::string, std::string> kMoved = {
      {"train.rank", "network.linear"},        {"train.alpha", "network.linear_alpha"},
      {"network.rank", "network.linear"},      {"network.alpha", "network.linear_alpha"},
      {"train.gpu_ids", "model.gpu_ids"},      {"gpu_ids", "model.gpu_ids"},
      {"train.low_vram", "model.low_vram"},    {"train.use_ema", "train.ema_config.use_ema"},
      {"train.ema_decay", "train.ema_config.ema_decay"},
      {"datasets[].caption_dropout_rate", "train.caption_dropout_rate"},
      {"train.learning_rate", "train.lr"},
  };
  if (auto it = kMoved.find(patternPath); it != kMoved.end()) return it->second;

  const auto lastOf = [](const std::string& p) {
    const size_t dot = p.find_last_of('.');
    return dot == std::string::npos ? p : p.substr(dot + 1);
  };
  const auto parentOf = [](const std::string& p) {
    const size_t dot = p.find_last_of('.');
    return dot == std::string::npos ? std::string() : p.substr(0, dot);
  };
  const std::string last = lastOf(patternPath);
  const std::string parent = parentOf(patternPath);
  std::string best;
  size_t bestScore = SIZE_MAX;
  // Same name in another section (model.lr -> train.lr) or a near spelling.
  std::vector<std::string> candidates;
  for (const auto& k : schema()) {
    candidates.push_back(k.path);
    for (std::string p = parentOf(k.path); !p.empty(); p = parentOf(p)) candidates.push_back(p);
  }
  // A near spelling only within the key's own section; from another section
  // only the same name (train.foo must not suggest the section 'job').
  const size_t allowed = std::max<size_t>(2, last.size() / 3);
  for (const auto& c : candidates) {
    const bool sameSection = parentOf(c) == parent;
    const size_t d = editDistance(last, lastOf(c));
    if (d > (sameSection ? allowed : 0)) continue;
    const size_t score = d * 2 + (sameSection ? 0 : 1);
    if (score < bestScore) bestScore = score, best = c;
  }
  return best;
}

void YamlReader::readMap(const YAML::Node& map, const std::string& patternPrefix, const std::string& concretePrefix,
                         size_t datasetIndex) {
  std::map<std::string, SourcePos> seen;  // YAML forbids a key twice in one mapping; readers disagree on which wins
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node keyNode = it->first;
    const YAML::Node value = it->second;
    const SourcePos pos = posOf(keyNode);
    if (!keyNode.IsScalar()) {
      problem(Severity::Error, concretePrefix.empty() ? "" : concretePrefix.substr(0, concretePrefix.size() - 1),
              pos, "a key must be a plain name, got " + describeNode(keyNode));
      continue;
    }
    const std::string name = keyNode.Scalar();
    if (name.size() > 64 || excerpt(name, name.size()) != name) {
      // No schema key looks like this (a binary or generated file): quoted short, not whole.
      if (++unknownKeys_ <= kListedUnknownKeys)
        problem(Severity::Warning, concretePrefix + excerpt(name), pos, "unknown key (ignored)");
      continue;
    }
    const std::string pattern = patternPrefix + name;
    const std::string concrete = concretePrefix + name;
    if (auto first = seen.find(name); first != seen.end()) {
      problem(Severity::Error, concrete, pos,
              "written twice (first at line " + std::to_string(first->second.line) + "); the last one is used",
              "keep one " + name + " line");
    }
    seen[name] = pos;
    out_.where.set(concrete, pos);

    if (pattern == "datasets") {
      readDatasets(value, pos);
      continue;
    }
    if (const KeySpec* spec = findKey(pattern)) {
      apply(*spec, datasetIndex, concrete, value, pos);
      continue;
    }
    bool isSection = false;
    for (const auto& k : schema())
      if (k.path.rfind(pattern + ".", 0) == 0) isSection = true;
    if (isSection) {
      if (value.IsMap()) {
        readMap(value, pattern + ".", concrete + ".", datasetIndex);
      } else if (!value.IsNull()) {
        problem(Severity::Error, concrete, pos, "expected a mapping of keys, got " + describeNode(value));
      }
      continue;
    }
    if (++unknownKeys_ > kListedUnknownKeys) continue;  // counted; one summary line at the end
    const std::string near = suggestKey(pattern);
    problem(Severity::Warning, concrete, pos, "unknown key (ignored)",
            near.empty() ? "" : "did you mean '" + near + "'?");
  }
}

void YamlReader::readDatasets(const YAML::Node& list, const SourcePos& pos) {
  if (list.IsNull()) {
    out_.config.datasets.clear();
    return;
  }
  if (!list.IsSequence()) {
    problem(Severity::Error, "datasets", pos, "expected a list of datasets, got " + describeNode(list),
            "datasets:\n    - type: images\n      folder_path: ...");
    return;
  }
  out_.config.datasets.assign(list.size(), DatasetConfig{});
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const std::string concrete = "datasets[" + std::to_string(i) + "]";
    const SourcePos entryPos = posOf(entry);
    out_.where.set(concrete, entryPos);
    if (!entry.IsMap()) {
      problem(Severity::Error, concrete, entryPos, "expected a mapping (type, folder_path, ...), got " +
                                                       describeNode(entry));
      continue;
    }
    readMap(entry, "datasets[].", concrete + ".", i);
  }
}

LoadedConfig parseRunConfig(const std::string& yamlText, const std::string& fileName) {
  LoadedConfig out;
  out.where.file = fileName;
  YamlReader reader(out);
  YAML::Node root;
  try {
    root = YAML::Load(yamlText);
  } catch (const YAML::ParserException& e) {
    reader.problem(Severity::Error, "", SourcePos{e.mark.line + 1, e.mark.column + 1, ""},
                   "YAML syntax error: " + e.msg);
    out.readable = false;
    return out;
  } catch (const YAML::Exception& e) {
    reader.problem(Severity::Error, "", {}, std::string("YAML error: ") + e.what());
    out.readable = false;
    return out;
  }
  if (!root.IsDefined() || root.IsNull()) {
    reader.problem(Severity::Error, "", {}, "the file is empty (expected a mapping with model:, train:, ...)");
    out.readable = false;
    return out;
  }
  if (!root.IsMap()) {
    reader.problem(Severity::Error, "", posOf(root),
                   "expected a mapping with model:, train:, ... at the top, got " + describeNode(root));
    out.readable = false;
    return out;
  }
  try {
    if (isAiToolkitJob(root)) {
      std::vector<UnusedKey> unused;
      importAiToolkitRoot(root, out, unused);
    } else {
      reader.readMap(root, "", "", 0);
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp can still throw on odd documents (e.g. aliases to nowhere).
    reader.problem(Severity::Error, "", SourcePos{e.mark.line + 1, e.mark.column + 1, ""},
                   std::string("YAML error: ") + e.msg);
  }
  if (reader.unknownKeysLeftOut() > 0)
    reader.problem(Severity::Warning, "", {}, std::to_string(reader.unknownKeysLeftOut()) +
                                                  " more unknown keys (ignored) not listed");
  return out;
}

LoadedConfig loadRunConfig(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const std::string why = io::pathProblem(path);
    throw IoError(path.string() + ": " + (why == "no such file or folder" ? "no such file" : why));
  }
  if (S_ISDIR(st.st_mode)) throw IoError(path.string() + ": is a folder, not a config file");
  // A run config is a few KB; yaml-cpp's node tree takes ~20x a file's size, so
  // a huge file is refused before it is read.
  if (st.st_size > static_cast<off_t>(kMaxConfigBytes))
    throw IoError(path.string() + ": " + std::to_string(st.st_size) + " bytes is too large for a run config (at most " +
                  std::to_string(kMaxConfigBytes) + ")");
  const std::string text = io::readFileBytes(path, kMaxConfigBytes + 1);
  if (text.size() > kMaxConfigBytes)
    throw IoError(path.string() + ": too large for a run config (at most " + std::to_string(kMaxConfigBytes) +
                  " bytes)");
  // YAML is text; a NUL byte means a binary file given by mistake.
  if (text.find('\0') != std::string::npos)
    throw IoError(path.string() + ": not a text file (contains NUL bytes); expected a YAML run config");
  return parseRunConfig(text, path.string());
}

namespace {

void emitValue(YAML::Emitter& out, const KeySpec& spec, const Value& v) {
  switch (spec.type) {
    case KeyType::Bool:
      out << std::get<bool>(v);
      break;
    case KeyType::Int:
      out << std::to_string(std::get<int64_t>(v));
      break;
    case KeyType::Float:
      out << formatDouble(std::get<double>(v));
      break;
    case KeyType::String:
    case KeyType::Path:
    case KeyType::Choice: {
      const auto& s = std::get<std::string>(v);
      if (s.empty()) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case KeyType::IntList:
      out << YAML::Flow << YAML::BeginSeq;
      for (int64_t x : std::get<std::vector<int64_t>>(v)) out << std::to_string(x);
      out << YAML::EndSeq;
      break;
    case KeyType::FloatList:
      out << YAML::Flow << YAML::BeginSeq;
      for (double x : std::get<std::vector<double>>(v)) out << formatDouble(x);
      out << YAML::EndSeq;
      break;
    case KeyType::StringList:
    case KeyType::ChoiceList: {
      const auto& l = std::get<std::vector<std::string>>(v);
      if (l.empty() || spec.type == KeyType::ChoiceList) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& s : l) {
        if (spec.type == KeyType::StringList) out << YAML::DoubleQuoted;
        out << s;
      }
      out << YAML::EndSeq;
      break;
    }
  }
}

// Emits the keys under `prefix` ("train.") as nested maps, in schema order.
void emitSection(YAML::Emitter& out, const RunConfig& cfg, const std::string& prefix, size_t datasetIndex) {
  std::vector<std::string> openedSubsections;
  for (const auto& spec : schema()) {
    if (spec.path.rfind(prefix, 0) != 0) continue;
    const std::string rest = spec.path.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot != std::string::npos) {
      const std::string sub = rest.substr(0, dot);
      if (std::find(openedSubsections.begin(), openedSubsections.end(), sub) != openedSubsections.end()) continue;
      openedSubsections.push_back(sub);
      out << YAML::Key << sub << YAML::Value << YAML::BeginMap;
      emitSection(out, cfg, prefix + sub + ".", datasetIndex);
      out << YAML::EndMap;
      continue;
    }
    const Value v = spec.get(cfg, datasetIndex);
    if (std::holds_alternative<std::monostate>(v)) continue;  // unset override
    out << YAML::Key << rest << YAML::Value;
    emitValue(out, spec, v);
  }
}

}  // namespace

std::string toYaml(const RunConfig& cfg) {
  YAML::Emitter out;
  out << YAML::Comment("Strata run config. Check it with: strata-train validate FILE") << YAML::Newline;
  out << YAML::BeginMap;
  for (const char* section : {"job", "model", "network", "train"}) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    emitSection(out, cfg, std::string(section) + ".", 0);
    out << YAML::EndMap;
  }
  out << YAML::Key << "datasets" << YAML::Value;
  if (cfg.datasets.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (size_t i = 0; i < cfg.datasets.size(); ++i) {
    out << YAML::BeginMap;
    emitSection(out, cfg, "datasets[].", i);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  for (const char* section : {"sample", "save"}) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    emitSection(out, cfg, std::string(section) + ".", 0);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) throw ConfigError("cannot write the config as YAML: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

void saveRunConfig(const RunConfig& cfg, const std::filesystem::path& path) {
  io::writeFileAtomic(path, toYaml(cfg));
}

void applyOverrides(LoadedConfig& loaded, const std::vector<std::string>& assignments) {
  YamlReader reader(loaded);
  for (const auto& a : assignments) {
    const SourcePos origin{0, 0, "--set " + a};
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      reader.problem(Severity::Error, "", origin, "expected key=value, e.g. --set train.lr=1e-4");
      continue;
    }
    const std::string key = a.substr(0, eq);
    const std::string text = a.substr(eq + 1);
    const KeySpec* spec = findKey(key);
    if (!spec) {
      const std::string near = YamlReader::suggestKey(splitDatasetPath(key).first);
      reader.problem(Severity::Error, key, origin, "unknown key", near.empty() ? "" : "did you mean '" + near + "'?");
      continue;
    }
    try {
      setValueText(loaded.config, key, text);
      loaded.where.set(key, origin);
    } catch (const ConfigError& e) {
      std::string msg = e.what();
      if (msg.rfind(key + ": ", 0) == 0) msg = msg.substr(key.size() + 2);
      reader.problem(Severity::Error, key, origin, msg, spec->rangeText());
    }
  }
}

}  // namespace strata::config
