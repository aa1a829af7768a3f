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
    reader.problem(Severity::Warning, "", {},
                   std::to_string(reader.unknownKeysLeftOut()) + " more unknown keys (ignored) not listed");
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

void saveRunConfig(const RunConfig& cfg, const std::filesystem::path& path) { io::writeFileAtomic(path, toYaml(cfg)); }

void setValueText(RunConfig& cfg, std::string_view path, const std::string& text) {
  const KeySpec* found = findKey(path);
  if (!found) throw ConfigError("unknown config key '" + std::string(path) + "'");
  const KeySpec& k = *found;
  // Strings are taken as typed: "a photo: sunset" is a prompt, not a mapping.
  if (k.type == KeyType::String || k.type == KeyType::Path || k.type == KeyType::Choice) {
    setValue(cfg, path, Value{text});
    return;
  }
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // Not valid YAML on its own (e.g. "a: b"): take it as a plain string.
    node = YAML::Node(text);
  }
  std::string error;
  std::optional<Value> v = valueFromYaml(k, node, error);
  if (!v) throw ConfigError(std::string(path) + ": " + error);
  setValue(cfg, path, *v);
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
