#pragma once
// The bridge's calls into core/train, in one place (internal to strata_ui).
// Everything here runs on the bridge's worker thread; nothing throws out of it.
#include <functional>
#include <string>
#include <vector>

#include "events/EventBus.h"

namespace strata::config {
struct RunConfig;
}
namespace strata::train {
class Trainer;
}

namespace strata::ui::runner {

// The running trainer's controls; thread-safe (the trainer's atomics).
class Control {
 public:
  explicit Control(train::Trainer& trainer) : trainer_(trainer) {}
  void stop();
  void pause(bool paused);
  void sampleNow();
  void saveNow();

 private:
  train::Trainer& trainer_;
};

// Where a run folder keeps its files (core/train/RunFolder names them; the UI
// does not spell them again).
struct RunFolderFiles {
  std::string config;      // config.yaml: the config as run
  std::string metrics;     // metrics.jsonl
  std::string samplesDir;  // samples/
  std::string samplesIndex;
  std::string exportsDir;  // exports/: the trainer's LoRA files, and the app's export default
};
RunFolderFiles runFolderFiles(const std::string& runDir);

using ControlSink = std::function<void(Control*)>;  // called with the control, then with nullptr at the end

// Trains `cfg` (or resumes `runDir`) on the calling thread until it finishes,
// stops or fails, reporting through `bus`. A core exception becomes a
// FailedEvent on the bus; the return value is false then.
bool runNew(const config::RunConfig& cfg, events::EventBus& bus, const ControlSink& control);
bool runResume(const std::string& runDir, events::EventBus& bus, const ControlSink& control);

// Writes the LoRA of runDir's last checkpoint in each format into outDir.
// Returns the files written; throws strata::Error with the reason.
std::vector<std::string> exportLora(const std::string& runDir, const std::string& outDir,
                                    const std::vector<std::string>& formats);

}  // namespace strata::ui::runner
