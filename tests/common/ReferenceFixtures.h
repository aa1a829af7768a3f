#pragma once
// Every fixture folder of one kind under the reference root (for the GPU tests,
// which run per kind rather than through the parity registry).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/TestSupport.h"

namespace strata::test {

inline std::vector<std::pair<std::filesystem::path, nlohmann::json>> fixturesOfKind(const std::string& kind) {
  std::vector<std::pair<std::filesystem::path, nlohmann::json>> out;
  const auto root = referenceDir();
  if (!std::filesystem::is_directory(root)) return out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().filename() != "manifest.json") continue;
    std::ifstream in(e.path());
    auto j = nlohmann::json::parse(in);
    if (j.value("kind", "") == kind) out.emplace_back(e.path().parent_path(), std::move(j));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace strata::test
