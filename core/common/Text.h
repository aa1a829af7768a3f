#pragma once
// Small string helpers the whole core shares (one copy each).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace strata {

inline bool startsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `s` with ASCII letters lowered (extensions, keywords, error texts: not locale text).
inline std::string toLowerAscii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// "15.3 GB": decimal GB with one digit; MB below 1 GB.
inline std::string formatBytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (std::llabs(bytes) >= 1000000000LL)
    std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  return buf;
}

}  // namespace strata
