// No Qt in this file: it is the seam between the bridge and core/train.
#include "ui/backend/TrainerRunner.h"

#include <exception>
#include <memory>

#include "common/Error.h"
#include "config/RunConfig.h"
#include "train/RunFolder.h"
#include "train/Trainer.h"

namespace strata::ui::runner {

RunFolderFiles runFolderFiles(const std::string& runDir) {
  const train::RunFolder folder(runDir);
  return {folder.configPath().string(), folder.metricsPath().string(), folder.samplesDir().string(),
          folder.samplesIndexPath().string(), folder.exportsDir().string()};
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
