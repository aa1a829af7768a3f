#pragma once
// The bridge's calls into core/train, in one place (internal to strata_ui): the
// run folder's checkpoints and exports. Training itself runs in a strata-train
// child process (TrainerBridge.h). Everything here runs on the bridge's worker thread.
#include <cstdint>
#include <string>
#include <vector>

#include "ui/backend/RunFolderFiles.h"

namespace strata::ui::runner {

// A run folder's complete checkpoints, oldest first (none for a folder that is not a run).
struct CheckpointInfo {
  int64_t step = 0;
  bool manual = false;  // saved by hand: kept apart from the rolling ones
  std::string path;
};
std::vector<CheckpointInfo> listCheckpoints(const std::string& runDir);

// What an export does with a file of the same name (train::ExistingExport).
enum class ExistingExport { Refuse, Overwrite, NewName };

// The files an export of the checkpoint of `step` writes (before any new name).
// Throws strata::Error with the reason.
std::vector<std::string> exportPaths(const std::string& runDir, const std::string& outDir,
                                     const std::vector<std::string>& formats, int64_t step);

// Writes the LoRA of runDir's checkpoint of `step` (< 0: the latest intact one) in
// each format into outDir, named with the step. Returns the files written; `notes`
// get what was passed over or renamed. Throws strata::Error with the reason.
std::vector<std::string> exportLora(const std::string& runDir, const std::string& outDir,
                                    const std::vector<std::string>& formats, int64_t step = -1,
                                    ExistingExport existing = ExistingExport::Refuse,
                                    std::vector<std::string>* notes = nullptr);

}  // namespace strata::ui::runner
