#include "config/YamlValue.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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
    case KeyType::IntList: return KeyType::Int;
    case KeyType::FloatList: return KeyType::Float;
    case KeyType::StringList: return KeyType::String;
    case KeyType::ChoiceList: return KeyType::Choice;
    default: return t;
  }
}

const char* expected(KeyType t) {
  switch (t) {
    case KeyType::Bool: return "true or false";
    case KeyType::Int: return "an integer";
    case KeyType::Float: return "a number";
    case KeyType::String: return "a string";
    case KeyType::Path: return "a path";
    case KeyType::Choice: return "a string";
    case KeyType::IntList: return "a list of integers";
    case KeyType::FloatList: return "a list of numbers";
    case KeyType::StringList: return "a list of strings";
    case KeyType::ChoiceList: return "a list of strings";
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
  const bool isList = t == KeyType::IntList || t == KeyType::FloatList || t == KeyType::StringList ||
                      t == KeyType::ChoiceList;
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
    if (auto* i = std::get_if<int64_t>(&*v)) ints.push_back(*i);
    else if (auto* d = std::get_if<double>(&*v)) doubles.push_back(*d);
    else strings.push_back(std::get<std::string>(*v));
  }
  if (t == KeyType::IntList) return Value{ints};
  if (t == KeyType::FloatList) return Value{doubles};
  return Value{strings};
}

}  // namespace strata::config
