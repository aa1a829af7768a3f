#include "config/YamlValue.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/Error.h"

namespace strata::config {
namespace {

bool isNull(const YAML::Node& n) { return !n.IsDefined() || n.IsNull(); }

std::optional<bool> parseBool(const std::string& s) {
  // YAML 1.1 spellings, as yaml-cpp and PyYAML (ai-toolkit) read them.
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
    if (s == t) return true;
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
    if (s == f) return false;
  return std::nullopt;
}

std::optional<double> parseDouble(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s == ".inf" || s == "+.inf") return HUGE_VAL;
  if (s == "-.inf") return -HUGE_VAL;
  if (s == ".nan" || s == ".NaN") return std::nan("");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE) return std::nullopt;
  // strtod takes "inf", "nan" and hex floats, YAML does not.
  if (s.find_first_of("xXiInN") != std::string::npos) return std::nullopt;
  return v;
}

std::optional<int64_t> parseInt(const std::string& s) {
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() + s.size() && errno == 0) return static_cast<int64_t>(v);
  // "1e3" or "16.0": an integer written as a float.
  if (auto d = parseDouble(s)) {
    if (std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.2e18) return static_cast<int64_t>(*d);
  }
  return std::nullopt;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

KeyType elementType(KeyType t) {
  switch (t) {
    case KeyType::IntList:
      return KeyType::Int;
    case KeyType::FloatList:
      return KeyType::Float;
    case KeyType::StringList:
      return KeyType::String;
    case KeyType::ChoiceList:
      return KeyType::Choice;
    default:
      return t;
  }
}

const char* expected(KeyType t) {
  switch (t) {
    case KeyType::Bool:
      return "true or false";
    case KeyType::Int:
      return "an integer";
    case KeyType::Float:
      return "a number";
    case KeyType::String:
      return "a string";
    case KeyType::Path:
      return "a path";
    case KeyType::Choice:
      return "a string";
    case KeyType::IntList:
      return "a list of integers";
    case KeyType::FloatList:
      return "a list of numbers";
    case KeyType::StringList:
      return "a list of strings";
    case KeyType::ChoiceList:
      return "a list of strings";
  }
  return "?";
}

// One scalar text as an element of type t.
std::optional<Value> scalarValue(KeyType t, const std::string& s) {
  switch (t) {
    case KeyType::Bool:
      if (auto b = parseBool(s)) return Value{*b};
      return std::nullopt;
    case KeyType::Int:
      if (auto i = parseInt(s)) return Value{*i};
      return std::nullopt;
    case KeyType::Float:
      if (auto d = parseDouble(s)) return Value{*d};
      return std::nullopt;
    default:
      return Value{s};
  }
}

}  // namespace

std::string describeNode(const YAML::Node& node) {
  if (isNull(node)) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "'" + excerpt(node.Scalar()) + "'";
}

std::string excerpt(const std::string& text, size_t maxChars) {
  std::string out;
  size_t i = 0;
  for (; i < text.size() && i < maxChars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::optional<Value> valueFromYaml(const KeySpec& key, const YAML::Node& node, std::string& error) {
  const KeyType t = key.type;
  const bool isList =
      t == KeyType::IntList || t == KeyType::FloatList || t == KeyType::StringList || t == KeyType::ChoiceList;
  if (isNull(node)) {
    if (key.nullable) return Value{};
    if (t == KeyType::String || t == KeyType::Path) return Value{std::string()};
    if (isList) {
      if (t == KeyType::IntList) return Value{std::vector<int64_t>{}};
      if (t == KeyType::FloatList) return Value{std::vector<double>{}};
      return Value{std::vector<std::string>{}};
    }
    error = std::string("expected ") + expected(t) + ", got nothing";
    return std::nullopt;
  }
  if (!isList) {
    if (!node.IsScalar()) {
      error = std::string("expected ") + expected(t) + ", got " + describeNode(node);
      return std::nullopt;
    }
    auto v = scalarValue(t, node.Scalar());
    if (!v) error = std::string("expected ") + expected(t) + ", got " + describeNode(node);
    return v;
  }

  // Lists: gather element texts, then convert each.
  std::vector<std::string> texts;
  if (node.IsSequence()) {
    for (const auto& el : node) {
      if (!el.IsScalar()) {
        error = std::string("expected ") + expected(t) + ", got an element that is " + describeNode(el);
        return std::nullopt;
      }
      texts.push_back(el.Scalar());
    }
  } else if (node.IsScalar() && key.commaString && node.Scalar().find(',') != std::string::npos) {
    std::string s = node.Scalar();
    size_t start = 0;
    while (true) {
      const size_t comma = s.find(',', start);
      texts.push_back(trim(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (node.IsScalar() && (key.scalarAsList || key.commaString)) {
    texts.push_back(trim(node.Scalar()));
  } else {
    error = std::string("expected ") + expected(t) + ", got " + describeNode(node);
    return std::nullopt;
  }

  const KeyType et = elementType(t);
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<std::string> strings;
  for (const auto& s : texts) {
    auto v = scalarValue(et, s);
    if (!v) {
      error = std::string("expected ") + expected(t) + ", got the element '" + s + "'";
      return std::nullopt;
    }
    if (auto* i = std::get_if<int64_t>(&*v))
      ints.push_back(*i);
    else if (auto* d = std::get_if<double>(&*v))
      doubles.push_back(*d);
    else
      strings.push_back(std::get<std::string>(*v));
  }
  if (t == KeyType::IntList) return Value{ints};
  if (t == KeyType::FloatList) return Value{doubles};
  return Value{strings};
}

// ---- the key walker ----------------------------------------------------------

SourcePos posOf(const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return {};
  return SourcePos{m.line + 1, m.column + 1, ""};
}

void YamlReader::problem(Severity severity, const std::string& key, const SourcePos& pos, const std::string& message,
                         const std::string& hint) {
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
    problem(Severity::Error, concretePath, pos, error,
            "type: " + keyTypeName(spec.type) + (spec.rangeText().empty() ? "" : ", " + spec.rangeText()));
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
      {"train.rank", "network.linear"},
      {"train.alpha", "network.linear_alpha"},
      {"network.rank", "network.linear"},
      {"network.alpha", "network.linear_alpha"},
      {"train.gpu_ids", "model.gpu_ids"},
      {"gpu_ids", "model.gpu_ids"},
      {"train.low_vram", "model.low_vram"},
      {"train.use_ema", "train.ema_config.use_ema"},
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
      problem(Severity::Error, concretePrefix.empty() ? "" : concretePrefix.substr(0, concretePrefix.size() - 1), pos,
              "a key must be a plain name, got " + describeNode(keyNode));
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
      problem(Severity::Error, concrete, entryPos,
              "expected a mapping (type, folder_path, ...), got " + describeNode(entry));
      continue;
    }
    readMap(entry, "datasets[].", concrete + ".", i);
  }
}

}  // namespace strata::config
