#include "lora/LoraTargets.h"

#include <regex>

#include "common/Error.h"

namespace strata::lora {

namespace {

bool globMatch(const char* p, const char* s) {
  // Iterative glob with backtracking on the last '*'.
  const char* star = nullptr;
  const char* resume = nullptr;
  while (*s) {
    if (*p == '?' || (*p && *p != '*' && *p == *s)) {
      ++p;
      ++s;
    } else if (*p == '*') {
      star = p++;
      resume = s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == '\0';
}

bool isRegex(const std::string& pattern) { return pattern.rfind("re:", 0) == 0; }

}  // namespace

LoraTargets::LoraTargets(std::vector<std::string> include, std::vector<std::string> exclude)
    : include_(std::move(include)), exclude_(std::move(exclude)) {
  for (const auto* list : {&include_, &exclude_}) {
    for (const auto& pattern : *list) {
      if (!isRegex(pattern)) continue;
      try {
        std::regex check(pattern.substr(3));
      } catch (const std::regex_error& e) {
        throw ConfigError("LoRA target pattern '" + pattern + "' is not a valid regex: " + e.what());
      }
    }
  }
}

bool LoraTargets::patternMatches(const std::string& pattern, const std::string& path) {
  if (isRegex(pattern)) return std::regex_match(path, std::regex(pattern.substr(3)));
  if (pattern.find_first_of("*?") != std::string::npos) return globMatch(pattern.c_str(), path.c_str());
  if (path == pattern) return true;
  return path.size() > pattern.size() && path.compare(path.size() - pattern.size(), pattern.size(), pattern) == 0 &&
         path[path.size() - pattern.size() - 1] == '.';
}

bool LoraTargets::matches(const std::string& path) const {
  bool included = false;
  for (const auto& p : include_) {
    if (patternMatches(p, path)) {
      included = true;
      break;
    }
  }
  if (!included) return false;
  for (const auto& p : exclude_)
    if (patternMatches(p, path)) return false;
  return true;
}

}  // namespace strata::lora
