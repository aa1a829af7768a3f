// No Qt in this file: it is the seam between the bridge and core/train.
#include "ui/backend/TrainerRunner.h"

#include <exception>
#include <memory>

#include "common/Error.h"
#include "events/EventBus.h"
#include "config/RunConfig.h"
#include "train/StopSignals.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"

namespace strata::ui::runner {

void Control::stop() { trainer_.requestStop(); }
void Control::pause(bool paused) { trainer_.setPaused(paused); }
void Control::sampleNow() { trainer_.requestSample(); }
void Control::saveNow() { trainer_.requestSave(); }

RunFolderFiles runFolderFiles(const std::string& runDir) {
  const train::RunFolder folder(runDir);
  return {folder.configPath().string(), folder.metricsPath().string(), folder.samplesDir().string(),
          folder.samplesIndexPath().string(), folder.exportsDir().string()};
}

namespace {

bool runTrainer(train::Trainer& trainer, const ControlSink& sink) {
  Control control(trainer);
  sink(&control);
  const train::StopOnSignals signals(trainer, "strata");  // SIGINT/SIGTERM/SIGHUP: checkpoint and stop
  const train::RunOutcome outcome = trainer.run();        // never throws
  sink(nullptr);
  return outcome == train::RunOutcome::Finished || outcome == train::RunOutcome::Stopped;
}

void reportFailure(events::EventBus& bus, const std::string& message) {
  events::FailedEvent failed;
  failed.message = message;
  bus.publish(failed);
}

}  // namespace

bool runNew(const config::RunConfig& cfg, events::EventBus& bus, const ControlSink& control) {
  try {
    train::Trainer trainer(cfg, bus);
    return runTrainer(trainer, control);
  } catch (const std::exception& e) {
    reportFailure(bus, e.what());
  } catch (...) {
    reportFailure(bus, "unknown error");
  }
  return false;
}

bool runResume(const std::string& runDir, events::EventBus& bus, const ControlSink& control) {
  try {
    std::unique_ptr<train::Trainer> trainer = train::Trainer::resumeFrom(runDir, bus);
    return runTrainer(*trainer, control);
  } catch (const std::exception& e) {
    reportFailure(bus, std::string("cannot resume ") + runDir + ": " + e.what());
  } catch (...) {
    reportFailure(bus, "cannot resume " + runDir + ": unknown error");
  }
  return false;
}

std::vector<CheckpointInfo> listCheckpoints(const std::string& runDir) {
  std::vector<CheckpointInfo> out;
  try {
    for (const auto& c : train::RunFolder(runDir).checkpoints()) out.push_back({c.step, c.manual, c.path.string()});
  } catch (const std::exception&) {
    // Not a readable folder: no checkpoints.
  }
  return out;
}

namespace {

std::vector<config::ExportFormat> parseFormats(const std::vector<std::string>& formats) {
  std::vector<config::ExportFormat> fmts;
  for (const std::string& f : formats) {
    const auto parsed = config::parseEnum<config::ExportFormat>(f);
    if (!parsed) throw ConfigError("unknown export format '" + f + "' (diffusers, kohya, comfy, peft)");
    fmts.push_back(*parsed);
  }
  return fmts;
}

}  // namespace

std::vector<std::string> exportPaths(const std::string& runDir, const std::string& outDir,
                                     const std::vector<std::string>& formats, int64_t step) {
  std::vector<std::string> out;
  for (const auto& p : train::exportPaths(runDir, parseFormats(formats), step, outDir)) out.push_back(p.string());
  return out;
}

std::vector<std::string> exportLora(const std::string& runDir, const std::string& outDir,
                                    const std::vector<std::string>& formats, int64_t step, ExistingExport existing,
                                    std::vector<std::string>* notes) {
  train::ExportOptions options;
  if (step >= 0) options.step = step;
  options.outDir = outDir;
  options.existing = existing == ExistingExport::Overwrite ? train::ExistingExport::Overwrite
                     : existing == ExistingExport::NewName ? train::ExistingExport::NewName
                                                           : train::ExistingExport::Refuse;
  std::vector<std::string> out;
  for (const auto& p : train::exportRun(runDir, parseFormats(formats), options, notes)) out.push_back(p.string());
  return out;
}

}  // namespace strata::ui::runner
