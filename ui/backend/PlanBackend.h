#pragma once
// The planned placement of a config, for the GPU map before a run: the planner
// only (shapes from the config or a checkpoint's header, no weights loaded),
// on this machine's devices or on simulated ones from a device spec ("4x16GB").
#include <QMap>
#include <QString>

#include "ui/backend/ViewModel.h"

namespace strata::config {
struct RunConfig;
}

namespace strata::ui {

class ConfigDocument;
struct RunOverrides;

// Never throws: a config or spec that cannot be planned comes back with `error` set.
// The view carries the words of the config's family for its parts (PlacementView::parts).
PlacementView planPlacementView(const config::RunConfig& cfg, const QString& deviceSpec);
PlacementView planPlacementView(const ConfigDocument& config, const QString& deviceSpec);

// Per-block sizes of a config's model (weights, adapters, EMA, optimizer), by
// block id, from the planner's cost model; empty when the config cannot be sized.
QMap<QString, BlockView> blockSizes(const config::RunConfig& cfg);
// Those of the config a run of the document trains (ConfigDocument::runConfig).
QMap<QString, BlockView> blockSizes(const ConfigDocument& config, const RunOverrides& overrides);

// Fills the live placement's blocks that carry no measured figures with `sizes`
// (the re-planned sizes of the run's config); measured blocks keep theirs.
void applyBlockSizes(PlacementView& live, const QMap<QString, BlockView>& sizes);

// "cuda:0 NVIDIA H200 141 GB, cpu 64 GB" for the status bar.
QString deviceSummary();

}  // namespace strata::ui
