#include "train/RunFolder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/Error.h"
#include "io/AtomicFile.h"
#include "io/Safetensors.h"

namespace strata::train {

namespace fs = std::filesystem;

namespace {

void appendLine(const fs::path& path, const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path.string() + ": cannot open for appending: " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw IoError(path.string() + ": append failed: " + std::strerror(err));
}

std::vector<nlohmann::json> readLines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
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

// A checkpoint's state.json says "manual": true when the user asked for it. An
// unreadable one counts as rolling: pruning may then drop it, as before.
bool isManual(const fs::path& statePath) {
  std::ifstream in(statePath);
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return j.is_object() && j.value("manual", false);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

RunFolder::RunFolder(fs::path root) : root_(std::move(root)) {}

void RunFolder::create() const {
  std::error_code ec;
  for (const auto& d : {root_, samplesDir(), checkpointsDir(), exportsDir()}) {
    fs::create_directories(d, ec);
    if (ec) throw IoError(d.string() + ": cannot create folder: " + ec.message());
  }
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
  std::ifstream in(statePath);
  if (!in) throw IoError(statePath.string() + ": cannot read (not a complete checkpoint)");
  try {
    in >> d.state;
  } catch (const std::exception& e) {
    throw IoError(statePath.string() + ": bad JSON: " + e.what());
  }
  if (!d.state.contains("step")) throw IoError(statePath.string() + ": no 'step'");
  d.step = d.state["step"].get<int64_t>();
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
  load("lora.safetensors", d.lora, true);
  load("optimizer.safetensors", d.optimizer, true);
  load("ema.safetensors", d.ema, false);
  load("rng.safetensors", d.rng, false);
  return d;
}

std::vector<fs::path> pruneCheckpoints(const RunFolder& folder, int64_t keep) {
  std::vector<fs::path> removed;
  if (keep < 1) return removed;
  auto all = folder.checkpoints();
  all.erase(std::remove_if(all.begin(), all.end(), [](const CheckpointRef& c) { return c.manual; }), all.end());
  std::error_code ec;
  while (static_cast<int64_t>(all.size()) > keep) {
    fs::remove_all(all.front().path, ec);
    if (!ec) removed.push_back(all.front().path);
    all.erase(all.begin());
  }
  return removed;
}

}  // namespace strata::train
