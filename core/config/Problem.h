#pragma once
// A problem found in a run config, with where it is, for the CLI ("file:line:col:
// error: key: message") and the UI (a marker on the key's form row).
#include <map>
#include <string>
#include <vector>

namespace strata::config {

enum class Severity { Error, Warning };

// 1-based; 0 = unknown (a default value, or a key set from the command line).
struct SourcePos {
  int line = 0;
  int column = 0;
  std::string origin;  // replaces the file name when not empty, e.g. "--set train.lr=..."
  bool known() const { return line > 0 || !origin.empty(); }
};

// Where each key of a loaded file was written, by concrete path ("model.gpu_ids",
// "datasets[0].folder_path", "train.ema_config"). Sections have entries too.
class SourceMap {
 public:
  std::string file;  // as given to the loader ("configs/demo.yaml", "<string>")

  void set(const std::string& path, SourcePos pos) { positions_[path] = std::move(pos); }
  bool has(const std::string& path) const { return positions_.count(path) != 0; }
  // The key's position, else its nearest written parent's, else {0, 0}.
  SourcePos find(const std::string& path) const;
  const std::map<std::string, SourcePos>& all() const { return positions_; }

 private:
  std::map<std::string, SourcePos> positions_;
};

struct Problem {
  Severity severity = Severity::Error;
  std::string key;   // "model.low_vram"; empty for file-level problems (syntax)
  std::string file;  // the file, or an origin such as "--set train.lr=..."
  int line = 0;      // 1-based, 0 = unknown
  int column = 0;
  std::string message;  // one line, no key prefix
  std::string hint;     // one line or empty

  bool isError() const { return severity == Severity::Error; }
  // "file:line:col: error: key: message" (parts that are unknown are left out),
  // then "\n  hint: ..." when there is a hint.
  std::string format() const;
};

// A problem about `key`, placed where `where` (optional) says the key was written:
// its file and line, or the origin of a --set.
Problem problemAt(Severity severity, const std::string& key, std::string message, std::string hint = "",
                  const SourceMap* where = nullptr);

bool hasErrors(const std::vector<Problem>& problems);
size_t countErrors(const std::vector<Problem>& problems);

}  // namespace strata::config
