#include "config/Problem.h"

#include <algorithm>

namespace strata::config {

SourcePos SourceMap::find(const std::string& path) const {
  std::string p = path;
  while (!p.empty()) {
    auto it = positions_.find(p);
    if (it != positions_.end()) return it->second;
    // Parent: "datasets[0].folder_path" -> "datasets[0]" -> "datasets".
    const size_t dot = p.find_last_of('.');
    const size_t bracket = p.find_last_of('[');
    size_t cut = std::string::npos;
    if (dot != std::string::npos) cut = dot;
    if (bracket != std::string::npos && (cut == std::string::npos || bracket > cut)) cut = bracket;
    if (cut == std::string::npos) break;
    p.resize(cut);
  }
  return {};
}

std::string Problem::format() const {
  std::string s;
  if (!file.empty()) {
    s += file;
    if (line > 0) {
      s += ":" + std::to_string(line);
      if (column > 0) s += ":" + std::to_string(column);
    }
    s += ": ";
  }
  s += isError() ? "error: " : "warning: ";
  if (!key.empty()) s += key + ": ";
  s += message;
  if (!hint.empty()) s += "\n  hint: " + hint;
  return s;
}

Problem problemAt(Severity severity, const std::string& key, std::string message, std::string hint,
                  const SourceMap* where) {
  Problem p;
  p.severity = severity;
  p.key = key;
  p.message = std::move(message);
  p.hint = std::move(hint);
  if (where) {
    p.file = where->file;
    const SourcePos pos = where->find(key);
    if (!pos.origin.empty()) {
      p.file = pos.origin;
    } else {
      p.line = pos.line;
      p.column = pos.column;
    }
  }
  return p;
}

bool hasErrors(const std::vector<Problem>& problems) {
  return std::any_of(problems.begin(), problems.end(), [](const Problem& p) { return p.isError(); });
}

size_t countErrors(const std::vector<Problem>& problems) {
  return static_cast<size_t>(
      std::count_if(problems.begin(), problems.end(), [](const Problem& p) { return p.isError(); }));
}

}  // namespace strata::config
