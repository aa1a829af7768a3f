#pragma once
// The planned placement of a config, for the GPU map before a run: the planner
// only (shapes from the config or a checkpoint's header, no weights loaded),
// on this machine's devices or on simulated ones from a device spec ("4x16GB").
#include <QMap>
#include <QPair>
#include <QString>
#include <QVector>

#include "ui/backend/ViewModel.h"

namespace strata::config {
struct RunConfig;
}

namespace strata::ui {

class ConfigDocument;
struct RunOverrides;

// Never throws: a config or spec that cannot be planned comes back with `error` set.
// The view carries the words of the config's family for its parts (PlacementView::parts).
// A config of several replicas (model.replicas) on cards shows every replica's
// cards, each named with its replica, and says "R replicas x C cards" first.
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

// One way to share a machine's N cards out (Setup): R replicas (data-parallel ranks)
// of C cards each, R x C = N.
struct ReplicaChoice {
  int replicas = 1;
  int cardsPerReplica = 1;
  QString text;  // "4 cards as 2 replicas of 2 cards"
  bool enabled = true;
  QString reason;  // why it is greyed (a replica does not fit its cards, or is refused)
  // What picking it sets, as YAML text per key (model.replicas, the replica's device set).
  QVector<QPair<QString, QString>> settings;
};
struct ReplicaChoices {
  int cards = 0;                   // CUDA cards of the devices planned for
  QString offReason;               // set when there is nothing to choose (one card, the CPU); choices is empty then
  QVector<ReplicaChoice> choices;  // one per divisor R of `cards`, R ascending
  int current = -1;                // the choice the config is now, or -1
};
// The choices for `cfg` on this machine (`deviceSpec` empty) or simulated devices
// ("4x16GB"); each planned with the planner (no weights). Never throws.
ReplicaChoices replicaChoices(const config::RunConfig& cfg, const QString& deviceSpec);
ReplicaChoices replicaChoices(const ConfigDocument& config, const QString& deviceSpec);

// "cuda:0 NVIDIA H200 141 GB, cpu 64 GB" for the status bar.
QString deviceSummary();

}  // namespace strata::ui
