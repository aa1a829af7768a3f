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

namespace strata::ui::runner {

// The running trainer's controls; thread-safe (the trainer's atomics).
class Control {
 public:
  virtual ~Control() = default;
  virtual void stop() = 0;
  virtual void pause(bool paused) = 0;
  virtual void sampleNow() = 0;
  virtual void saveNow() = 0;
};

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
