#include "train/RunSink.h"

#include <utility>

#include "io/AtomicFile.h"
#include "io/Image.h"

namespace strata::train {

namespace fs = std::filesystem;

RunSink::RunSink(fs::path runDir, events::EventBus& bus) : folder_(std::move(runDir)), bus_(bus) {}

RunSink::~RunSink() = default;

void RunSink::create(bool withSaves) { folder_.create(withSaves); }

void RunSink::writeConfig(const std::string& yaml) { io::writeFileAtomic(folder_.configPath(), yaml); }

void RunSink::truncateLogsAfter(int64_t step) { folder_.truncateLogsAfter(step); }

fs::path RunSink::setAsideDamagedCheckpoint(const CheckpointRef& ref) { return train::setAsideDamagedCheckpoint(ref); }

void RunSink::appendMetrics(const nlohmann::json& line) { folder_.appendMetrics(line); }

void RunSink::writeCheckpoint(const CheckpointData& data, int64_t keep, std::string& path) {
  const fs::path written = train::writeCheckpoint(folder_, data);
  path = written.string();
  events::CheckpointEvent ce{written.string(), data.step, {}};
  for (const auto& r : pruneCheckpoints(folder_, keep)) ce.removed.push_back(r.string());
  bus_.publish(ce);
}

fs::path RunSink::writeSample(int64_t step, int64_t promptIndex, const Sample& sample) {
  fs::path path = folder_.samplePath(step, promptIndex);
  if (sample.image.defined()) {
    io::writePng(path, sample.image,
                 {{"prompt", sample.prompt},
                  {"step", std::to_string(step)},
                  {"seed", std::to_string(sample.seed)},
                  {"Software", "Strata"}});
  } else {
    path.replace_extension(".txt");
    io::writeFileAtomic(path, sample.text);
  }
  nlohmann::json line = sample.indexFields;
  line["file"] = path.filename().string();
  line["step"] = step;
  line["prompt_index"] = promptIndex;
  line["prompt"] = sample.prompt;
  line["seed"] = sample.seed;
  folder_.appendSampleIndex(line);
  bus_.publish(events::SampleEvent{path.string(), step, promptIndex, sample.prompt, sample.seed});
  return path;
}

void RunSink::writeExport(const fs::path& path, const std::string& format, int64_t step,
                          const std::function<void(const fs::path&)>& write) {
  write(path);
  bus_.publish(events::ExportEvent{path.string(), format, step});
}

}  // namespace strata::train
