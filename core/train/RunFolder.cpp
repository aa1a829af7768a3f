#include "train/RunFolder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>
#include <vector>

#include "common/Error.h"
#include "common/Text.h"
#include "io/AtomicFile.h"
#include "io/FileBytes.h"
#include "io/JsonFile.h"
#include "io/Safetensors.h"

namespace strata::train {

namespace fs = std::filesystem;

namespace {

void appendLine(const fs::path& path, const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot open for appending: " + std::strerror(errno));
  struct stat before {};
  if (::fstat(fd, &before) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(path.string() + ": cannot append: " + std::strerror(err));
  }
  // A short write (the disk filled up midway) is followed by a write that
  // returns the real error; on any failure the file is cut back to its old
  // length, so no torn line is left behind.
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err != 0 && done > 0 && ::ftruncate(fd, before.st_size) != 0) {
    // Cannot cut it back: recover() drops the torn line at the next open.
  }
  ::close(fd);
  if (err != 0) throw IoError(path.string() + ": cannot append a line: " + std::strerror(err));
}

std::vector<nlohmann::json> readLines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  std::istringstream in(io::readFileBytes(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      // A torn last line from a killed process: dropped.
    }
  }
  return out;
}

void truncateLines(const fs::path& path, int64_t step) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::string kept;
  for (const auto& j : readLines(path)) {
    if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step) continue;
    kept += j.dump() + "\n";
  }
  io::writeFileAtomic(path, kept);
}

std::optional<int64_t> stepOfName(const std::string& name) {
  if (name.rfind("step_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

// ".<name>.tmp.XXXXXX": a temp file of io::writeFileAtomic whose process died.
bool isAtomicTemp(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  return name.size() > 1 && name[0] == '.' && at != std::string::npos && at > 1 && name.size() - at == 11;
}

void removeTempFiles(const fs::path& dir, std::vector<std::string>& notes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!isAtomicTemp(e.path().filename().string()) || !fs::is_regular_file(e.path(), ec)) continue;
    fs::remove(e.path(), ec);
    if (!ec) notes.push_back("removed the unfinished file " + e.path().string());
  }
}

// Cuts the log back to its last whole line.
void dropTornTail(const fs::path& path, std::vector<std::string>& notes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const std::string text = io::readFileBytes(path);
  if (text.empty() || text.back() == '\n') return;
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  fs::resize_file(path, keep, ec);
  if (ec) throw IoError(path.string() + ": cannot cut off its torn last line: " + ec.message());
  notes.push_back(path.string() + ": cut off a torn last line");
}

// A checkpoint's state.json says "manual": true when the user asked for it. An
// unreadable one counts as rolling: pruning may then drop it, as before.
bool isManual(const fs::path& statePath) {
  try {
    const nlohmann::json j = io::readJsonFile(statePath);
    return j.is_object() && j.value("manual", false);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

RunFolder::RunFolder(fs::path root) : root_(std::move(root)) {}

void RunFolder::create(bool withSaves) const {
  std::error_code ec;
  std::vector<fs::path> dirs = {root_, samplesDir()};
  if (withSaves) dirs.insert(dirs.end(), {checkpointsDir(), exportsDir()});
  for (const auto& d : dirs) {
    fs::create_directories(d, ec);
    if (ec) throw IoError(d.string() + ": cannot create folder: " + ec.message());
  }
}

std::vector<std::string> RunFolder::recover() const {
  std::vector<std::string> notes;
  std::error_code ec;
  const fs::path ck = checkpointsDir();
  if (fs::is_directory(ck, ec)) {
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(ck, ec)) entries.push_back(e.path());
    for (const auto& p : entries) {
      const std::string name = p.filename().string();
      if (startsWith(name, ".old-")) {
        // A re-save cut between "step_N -> .old-step_N" and ".partial -> step_N".
        const fs::path target = ck / name.substr(5);
        if (!fs::exists(target, ec) && fs::exists(p / "state.json", ec)) {
          fs::rename(p, target, ec);
          if (ec) throw IoError(p.string() + ": cannot put back as " + target.string() + ": " + ec.message());
          notes.push_back("put back " + target.string() + " (its re-save was interrupted)");
        } else {
          fs::remove_all(p, ec);
        }
      } else if (startsWith(name, ".partial-") || startsWith(name, ".trash-")) {
        fs::remove_all(p, ec);
        if (ec) throw IoError(p.string() + ": cannot remove a leftover of an interrupted run: " + ec.message());
        notes.push_back("removed " + p.string() +
                        (startsWith(name, ".trash-") ? " (an interrupted prune)" : " (an unfinished checkpoint)"));
      }
    }
  }
  for (const auto& d : {root_, samplesDir(), exportsDir()}) removeTempFiles(d, notes);
  dropTornTail(metricsPath(), notes);
  dropTornTail(samplesIndexPath(), notes);
  return notes;
}

fs::path RunFolder::samplePath(int64_t step, int64_t promptIndex) const {
  char name[64];
  std::snprintf(name, sizeof name, "step_%08lld_p%02lld.png", static_cast<long long>(step),
                static_cast<long long>(promptIndex));
  return samplesDir() / name;
}

std::string RunFolder::checkpointName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::vector<CheckpointRef> RunFolder::checkpoints() const {
  std::vector<CheckpointRef> out;
  std::error_code ec;
  if (!fs::is_directory(checkpointsDir(), ec)) return out;
  for (const auto& e : fs::directory_iterator(checkpointsDir(), ec)) {
    const auto step = stepOfName(e.path().filename().string());
    if (!step || !fs::exists(e.path() / "state.json", ec)) continue;
    out.push_back({*step, e.path(), isManual(e.path() / "state.json")});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointRef> RunFolder::latestCheckpoint() const {
  auto all = checkpoints();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void RunFolder::appendMetrics(const nlohmann::json& line) const { appendLine(metricsPath(), line); }
void RunFolder::appendSampleIndex(const nlohmann::json& line) const { appendLine(samplesIndexPath(), line); }

void RunFolder::truncateLogsAfter(int64_t step) const {
  truncateLines(metricsPath(), step);
  truncateLines(samplesIndexPath(), step);
}

std::vector<nlohmann::json> RunFolder::readMetrics() const { return readLines(metricsPath()); }

fs::path writeCheckpoint(const RunFolder& folder, const CheckpointData& data) {
  const auto name = RunFolder::checkpointName(data.step);
  const auto finalDir = folder.checkpointsDir() / name;
  const auto partial = folder.checkpointsDir() / (".partial-" + name);
  std::error_code ec;
  fs::remove_all(partial, ec);
  try {
    fs::create_directories(partial);
    io::writeSafetensors(partial / "lora.safetensors", data.lora, {{"format", "strata-checkpoint"}});
    io::writeSafetensors(partial / "optimizer.safetensors", data.optimizer);
    if (!data.ema.empty()) io::writeSafetensors(partial / "ema.safetensors", data.ema);
    io::writeSafetensors(partial / "rng.safetensors", data.rng);
    nlohmann::json state = data.state;
    state["step"] = data.step;
    if (data.manual) state["manual"] = true;
    // state.json last: its presence marks a complete checkpoint.
    io::writeFileAtomic(partial / "state.json", state.dump(2) + "\n");
    if (fs::exists(finalDir)) {
      // Re-saving the same step: move the old one aside first, drop it after.
      const auto old = folder.checkpointsDir() / (".old-" + name);
      fs::remove_all(old, ec);
      fs::rename(finalDir, old);
      fs::rename(partial, finalDir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(partial, finalDir);
    }
  } catch (const std::exception& e) {
    fs::remove_all(partial, ec);
    throw IoError("checkpoint " + finalDir.string() + " not written: " + e.what());
  }
  return finalDir;
}

CheckpointData readCheckpoint(const fs::path& dir) {
  CheckpointData d;
  const auto statePath = dir / "state.json";
  std::error_code ec;
  if (!fs::is_regular_file(statePath, ec)) throw IoError(statePath.string() + ": missing (not a complete checkpoint)");
  d.state = io::readJsonFile(statePath);  // IoError naming the file
  if (!d.state.contains("step")) throw IoError(statePath.string() + ": no 'step'");
  const auto& stepValue = d.state["step"];
  if (!stepValue.is_number_integer() || stepValue.get<int64_t>() < 0)
    throw IoError(statePath.string() + ": 'step' is " + stepValue.dump() + ", not a step number (0 or more)");
  d.step = stepValue.get<int64_t>();
  // The folder's name says the step too (step_00000120): a state that disagrees is not this checkpoint's.
  const std::string name = dir.filename().string();
  const std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : std::string();
  if (!digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos &&
      std::stoll(digits) != d.step)
    throw IoError(statePath.string() + ": 'step' is " + std::to_string(d.step) + " but the checkpoint folder is " +
                  name);
  d.manual = d.state.value("manual", false);
  auto load = [&](const char* file, NamedTensors& into, bool required) {
    const auto p = dir / file;
    std::error_code ec;
    if (!fs::exists(p, ec)) {
      if (required) throw IoError(p.string() + ": missing from the checkpoint");
      return;
    }
    auto f = io::SafetensorsFile::open(p);
    for (const auto& n : f.names()) into.emplace_back(n, f.tensorCopy(n));
  };
  try {
    load("lora.safetensors", d.lora, true);
    load("optimizer.safetensors", d.optimizer, true);
    load("ema.safetensors", d.ema, false);
    load("rng.safetensors", d.rng, false);
  } catch (const IoError&) {
    throw;
  } catch (const std::exception& e) {
    throw IoError(dir.string() + ": " + e.what());
  }
  // Whole: every LoRA weight has its optimizer state (a checkpoint must resume).
  if (d.lora.empty()) throw IoError((dir / "lora.safetensors").string() + ": holds no LoRA weights");
  std::set<std::string> opt;
  for (const auto& [k, t] : d.optimizer) opt.insert(k);
  // The model family's key prefix (state.json says it; FLUX's before it did).
  const std::string prefix = d.state.value("lora_prefix", std::string("transformer."));
  size_t missing = 0;
  std::string first;
  for (const auto& [k, t] : d.lora) {
    const std::string param = k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : k;
    // Float moments (adamw) or 8-bit blocks and their maxima (adamw8bit).
    const bool eightBit = opt.count(param + ".exp_avg.blockwise8") > 0;
    const std::vector<const char*> plain = {".exp_avg", ".exp_avg_sq", ".step"};
    const std::vector<const char*> blocks = {".exp_avg.blockwise8", ".exp_avg.blockwise8_absmax",
                                             ".exp_avg_sq.blockwise8", ".exp_avg_sq.blockwise8_absmax", ".step"};
    for (const char* sfx : eightBit ? blocks : plain)
      if (!opt.count(param + sfx)) {
        if (missing++ == 0) first = param + sfx;
      }
  }
  if (missing > 0)
    throw IoError((dir / "optimizer.safetensors").string() + ": incomplete, " + std::to_string(missing) +
                  " optimizer tensor(s) missing (first: " + first + ")");
  return d;
}

IntactCheckpoint readLatestIntactCheckpoint(const RunFolder& folder) {
  auto all = folder.checkpoints();
  if (all.empty()) throw IoError(folder.root().string() + ": no checkpoint");
  IntactCheckpoint out;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      out.data = readCheckpoint(it->path);
      out.ref = *it;
      return out;
    } catch (const std::exception& e) {
      out.damaged.push_back(e.what());
    }
  }
  std::string msg = folder.root().string() + ": no intact checkpoint:";
  for (const auto& d : out.damaged) msg += "\n  " + d;
  throw IoError(msg);
}

fs::path setAsideDamagedCheckpoint(const CheckpointRef& ref) {
  const fs::path dest = ref.path.parent_path() / ("damaged-" + ref.path.filename().string());
  std::error_code ec;
  fs::remove_all(dest, ec);
  fs::rename(ref.path, dest, ec);
  if (ec) throw IoError(ref.path.string() + ": cannot move the damaged checkpoint aside: " + ec.message());
  return dest;
}

std::vector<fs::path> pruneCheckpoints(const RunFolder& folder, int64_t keep) {
  std::vector<fs::path> removed;
  if (keep < 1) return removed;
  auto all = folder.checkpoints();
  all.erase(std::remove_if(all.begin(), all.end(), [](const CheckpointRef& c) { return c.manual; }), all.end());
  std::error_code ec;
  while (static_cast<int64_t>(all.size()) > keep) {
    const fs::path dir = all.front().path;
    const fs::path trash = dir.parent_path() / (".trash-" + dir.filename().string());
    fs::remove_all(trash, ec);
    fs::rename(dir, trash, ec);  // step_N is gone in one step; the rest may be cut by a kill
    if (!ec) {
      fs::remove_all(trash, ec);
      removed.push_back(dir);
    }
    all.erase(all.begin());
  }
  return removed;
}

}  // namespace strata::train
