#pragma once
// Where a run folder keeps its files, for the widgets (no core header: the
// paths come from core/train/RunFolder inside strata_ui_backend).
#include <string>

namespace strata::ui::runner {

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

}  // namespace strata::ui::runner
