#pragma once
// The run folder: everything one training run writes.
//   config.yaml                 the config as run (after --set overrides)
//   metrics.jsonl               one JSON object per optimizer step
//   samples/step_00000010_p00.png  samples by step and prompt index (prompt in the PNG text chunk)
//   samples/index.jsonl         one line per sample: file, step, prompt index, prompt, seed
//   checkpoints/step_00000010/  lora, optimizer, ema, rng (.safetensors) and state.json
//   exports/<job>_<format>.safetensors  the LoRA in the formats the config lists
// Checkpoints are written into a hidden partial folder and renamed into place,
// so a crash or a failed write never leaves a half checkpoint, and the previous
// one stays as it was. The last N rolling checkpoints are kept; one the user asked
// for ("save now", state.json "manual": true) is never pruned.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct CheckpointRef {
  int64_t step = 0;
  std::filesystem::path path;
  bool manual = false;  // asked for by the user; kept apart from the rolling ones
};

// What one checkpoint holds. Tensors are written as given (CPU copies are made
// one at a time by the writer).
struct CheckpointData {
  int64_t step = 0;
  NamedTensors lora;       // LoraNetwork::stateDict (unscaled float32)
  NamedTensors optimizer;  // "<param>.exp_avg", ".exp_avg_sq", ".step"
  NamedTensors ema;        // "<param>" -> shadow; empty without EMA
  NamedTensors rng;        // captureRngStates
  nlohmann::json state;    // step, schedule, data cursor, loss smoothing, ...
  bool manual = false;     // written as state.json "manual": true
};

class RunFolder {
 public:
  explicit RunFolder(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path configPath() const { return root_ / "config.yaml"; }
  std::filesystem::path metricsPath() const { return root_ / "metrics.jsonl"; }
  std::filesystem::path samplesDir() const { return root_ / "samples"; }
  std::filesystem::path samplesIndexPath() const { return samplesDir() / "index.jsonl"; }
  std::filesystem::path checkpointsDir() const { return root_ / "checkpoints"; }
  std::filesystem::path exportsDir() const { return root_ / "exports"; }

  // Creates the folders (without checkpoints/ and exports/ when `withSaves` is
  // false: a run that saves nothing). Throws IoError.
  void create(bool withSaves = true) const;
  // Cleans what a killed process left behind; call it holding the folder's lock
  // (RunFolderLock), since a live run's partial files look the same. Removes
  // partial and trash checkpoint folders and temp files, puts back a checkpoint
  // whose re-save was cut between its two renames, and cuts a torn last line off
  // the logs. Returns one note per repair.
  std::vector<std::string> recover() const;

  // samples/step_00000010_p00.png
  std::filesystem::path samplePath(int64_t step, int64_t promptIndex) const;
  static std::string checkpointName(int64_t step);  // "step_00000010"

  // Complete checkpoints (state.json present), oldest first.
  std::vector<CheckpointRef> checkpoints() const;
  std::optional<CheckpointRef> latestCheckpoint() const;

  // Appends one whole line: on a failed or short write (disk full) the file is
  // cut back to its old length, so a line is never torn; IoError names the OS
  // error (ENOSPC, EFBIG, ...).
  void appendMetrics(const nlohmann::json& line) const;
  void appendSampleIndex(const nlohmann::json& line) const;
  // Drops lines whose "step" is greater than `step` (a resume continues after
  // the checkpoint); rewritten atomically.
  void truncateLogsAfter(int64_t step) const;
  // Every metrics line, in order.
  std::vector<nlohmann::json> readMetrics() const;

 private:
  std::filesystem::path root_;
};

// Writes `data` as checkpoints/step_N atomically (partial folder + rename).
// Throws IoError naming what failed; the folder of a previous checkpoint is
// untouched then.
std::filesystem::path writeCheckpoint(const RunFolder& folder, const CheckpointData& data);

// Reads a checkpoint folder and checks it is whole: every LoRA weight has its
// optimizer state. Throws IoError naming what is wrong.
CheckpointData readCheckpoint(const std::filesystem::path& dir);

// The newest checkpoint that reads back whole; the newer ones that do not are
// listed in `damaged` ("<path>: <reason>"). Throws IoError when there is no
// checkpoint, or none is intact (every reason listed).
struct IntactCheckpoint {
  CheckpointRef ref;
  CheckpointData data;
  std::vector<std::string> damaged;
};
IntactCheckpoint readLatestIntactCheckpoint(const RunFolder& folder);

// Renames a damaged checkpoint to checkpoints/damaged-step_N (kept for a look,
// no longer a checkpoint); returns the new path.
std::filesystem::path setAsideDamagedCheckpoint(const CheckpointRef& ref);

// Deletes all but the newest `keep` rolling checkpoints (keep < 1 keeps all);
// manual ones are neither deleted nor counted. Returns the folders removed. Each is renamed to a trash name first, so a
// kill midway never leaves a half-deleted step_N (RunFolder::recover empties the trash).
std::vector<std::filesystem::path> pruneCheckpoints(const RunFolder& folder, int64_t keep);

}  // namespace strata::train
