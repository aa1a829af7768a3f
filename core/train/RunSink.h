#pragma once
// The one writer of a run's folder (train/RunFolder.h): the trainer owns one per
// run and every write of the run goes through it: the config, the metrics lines,
// checkpoints (and their pruning), samples with the samples index, LoRA exports.
// Families return samples as values (Sample) and serialise an export at the path
// the sink gives; neither families nor the rest of train/ write into the folder.
// Where a write has an event (SampleEvent, CheckpointEvent, ExportEvent) the sink
// publishes it once the write is done. A run that must not write (a data-parallel
// replica other than the first) gets a sink that does not; tests get one that
// records the writes.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "events/EventBus.h"
#include "train/RunFolder.h"

namespace strata::train {

// One sample of a sample.prompts entry, as the family made it; the sink names its
// file, writes it and its samples/index.jsonl line, and publishes the SampleEvent.
struct Sample {
  std::string prompt;  // as sampled (an images run's with its trigger word)
  int64_t seed = 0;
  // An image: RGB [3, H, W] in 0..1 (as io::writePng takes it), written as PNG with the prompt,
  // step and seed in its text chunks. Else `text` is the sample, written as .txt.
  at::Tensor image;
  std::string text;
  // Fields of its index line beyond file, step, prompt_index, prompt and seed (a
  // text sample's temperature and completion).
  nlohmann::json indexFields = nlohmann::json::object();
};

class RunSink {
 public:
  RunSink(std::filesystem::path runDir, events::EventBus& bus);
  virtual ~RunSink();
  RunSink(const RunSink&) = delete;
  RunSink& operator=(const RunSink&) = delete;

  // The folder's paths and what it holds, for reading.
  const RunFolder& folder() const { return folder_; }
  // False for a sink that writes nothing (SilentSink): the trainer then skips the
  // work whose only result is a write (gathering a checkpoint, making samples).
  virtual bool writes() const { return true; }

  // The folders (RunFolder::create) and the config as run.
  virtual void create(bool withSaves);
  virtual void writeConfig(const std::string& yaml);
  // Log lines after `step` dropped (RunFolder::truncateLogsAfter).
  virtual void truncateLogsAfter(int64_t step);
  // A damaged checkpoint renamed aside (setAsideDamagedCheckpoint); returns its new path.
  virtual std::filesystem::path setAsideDamagedCheckpoint(const CheckpointRef& ref);
  // One metrics.jsonl line.
  virtual void appendMetrics(const nlohmann::json& line);
  // `data` as checkpoints/step_N (writeCheckpoint), then the rolling ones pruned to
  // `keep` and the CheckpointEvent published. `path` is set once the checkpoint is
  // in place, so a prune that throws after it still leaves it named.
  virtual void writeCheckpoint(const CheckpointData& data, int64_t keep, std::string& path);
  // samples/step_N_pNN.png (or .txt), its index line and the SampleEvent.
  // Returns the file. Throws IoError; nothing is published then.
  virtual std::filesystem::path writeSample(int64_t step, int64_t promptIndex, const Sample& sample);
  // A LoRA export at `path` (below folder().exportsDir()): `write` serialises it
  // there; then the ExportEvent (`format`: its config name).
  virtual void writeExport(const std::filesystem::path& path, const std::string& format, int64_t step,
                           const std::function<void(const std::filesystem::path&)>& write);

 protected:
  events::EventBus& bus() { return bus_; }

 private:
  RunFolder folder_;
  events::EventBus& bus_;
};

// The sink of a data-parallel replica other than rank 0: it reads the folder (a
// resume's checkpoint) and writes nothing there; rank 0 writes for the run.
class SilentSink final : public RunSink {
 public:
  using RunSink::RunSink;
  bool writes() const override { return false; }
  void create(bool /*withSaves*/) override {}
  void writeConfig(const std::string& /*yaml*/) override {}
  void truncateLogsAfter(int64_t /*step*/) override {}
  std::filesystem::path setAsideDamagedCheckpoint(const CheckpointRef& ref) override { return ref.path; }
  void appendMetrics(const nlohmann::json& /*line*/) override {}
  void writeCheckpoint(const CheckpointData& /*data*/, int64_t /*keep*/, std::string& /*path*/) override {}
  std::filesystem::path writeSample(int64_t /*step*/, int64_t /*promptIndex*/, const Sample& /*sample*/) override {
    return {};
  }
  void writeExport(const std::filesystem::path& /*path*/, const std::string& /*format*/, int64_t /*step*/,
                   const std::function<void(const std::filesystem::path&)>& /*write*/) override {}
};

}  // namespace strata::train
