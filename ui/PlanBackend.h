#pragma once
// The planned placement of a config, for the GPU map before a run: the planner
// only (shapes from the config or a checkpoint's header, no weights loaded),
// on this machine's devices or on simulated ones from a device spec ("4x16GB").
#include <QString>

#include "ui/ViewModel.h"

namespace strata::config {
struct RunConfig;
}

namespace strata::ui {

// Never throws: a config or spec that cannot be planned comes back with `error` set.
PlacementView planPlacementView(const config::RunConfig& cfg, const QString& deviceSpec);

// "cuda:0 NVIDIA H200 141 GB, cpu 64 GB" for the status bar.
QString deviceSummary();

}  // namespace strata::ui
