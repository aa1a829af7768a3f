#pragma once
// Helpers for the config tests: find a problem by key and check its line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/Problem.h"

namespace strata::config::test {

inline std::string dump(const std::vector<Problem>& problems) {
  std::string s;
  for (const auto& p : problems) s += "  " + p.format() + "\n";
  return s.empty() ? "  (no problems)\n" : s;
}

// Success when a problem of `severity` names `key` at `line` (and its formatted
// text carries "file:line:"). `needle`, when given, must appear in message+hint.
inline ::testing::AssertionResult hasProblem(const std::vector<Problem>& problems, Severity severity,
                                             const std::string& key, int line, const std::string& needle = "") {
  for (const auto& p : problems) {
    if (p.severity != severity || p.key != key || p.line != line) continue;
    if (!needle.empty() && (p.message + " " + p.hint).find(needle) == std::string::npos) continue;
    const std::string text = p.format();
    if (text.find(":" + std::to_string(line) + ":") == std::string::npos)
      return ::testing::AssertionFailure() << "line missing in: " << text;
    if (text.find(key) == std::string::npos) return ::testing::AssertionFailure() << "key missing in: " << text;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << (severity == Severity::Error ? "error" : "warning") << " at " << key
                                       << " line " << line << (needle.empty() ? "" : " with '" + needle + "'")
                                       << " not found in:\n"
                                       << dump(problems);
}

inline bool hasKey(const std::vector<Problem>& problems, const std::string& key) {
  for (const auto& p : problems)
    if (p.key == key) return true;
  return false;
}

}  // namespace strata::config::test
