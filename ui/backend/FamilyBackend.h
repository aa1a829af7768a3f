#pragma once
// The app's view of the model families (model.arch): their names, the dataset
// types and LoRA forms each takes, the keys of a config one does not read, a
// config switched from one family to another, and the GPU map's words for a
// family's parts. Internal to strata_ui_backend (it names core types; the pages
// read ConfigViews.h and ConfigDocument.h); all of it is what the families say
// about themselves (config/FamilyRegistry.h), the unused keys config::keysNotRead
// (the validator's list).
#include <QString>
#include <QVector>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "ui/backend/ConfigViews.h"
#include "ui/backend/ViewModel.h"

namespace strata::ui::backend {

// Every family the chooser offers, in its order.
std::vector<std::string> modelFamilies();
// The family's own name: "FLUX.1", "Llama".
QString familyName(const std::string& arch);
// What a run of the family trains, for the chooser: "FLUX.1 image LoRA".
QString familyTitle(const std::string& arch);

// The dataset types the family trains on, the first being the one a switch to it
// sets (the validator's rules: FLUX images / latents / synthetic / shapes, a
// causal LM jsonl / synthetic).
std::vector<config::DatasetType> datasetTypesOf(const std::string& arch);
// The LoRA forms the family writes, the first being the one a switch to it sets.
std::vector<config::ExportFormat> exportFormatsOf(const std::string& arch);

// The keys set away from their defaults ("datasets[0].folder_path", the value as YAML
// text) that `arch` does not read. model.is_flux is left out, as the validator does.
QVector<UnusedKeyView> unusedKeys(const config::RunConfig& cfg, const std::string& arch);

// The values of keys both families read that `arch` refuses, and what a switch sets.
QVector<FamilyChangeView> familyChanges(const config::RunConfig& cfg, const std::string& arch);

// `cfg` with its unusedKeys for `arch` back at their defaults.
config::RunConfig dropUnusedKeys(const config::RunConfig& cfg, const std::string& arch);

// `cfg` with model.arch = `arch` and the familyChanges applied; with `dropUnused`
// the unusedKeys go back to their defaults too (else they stay, listed as unused).
config::RunConfig switchFamily(const config::RunConfig& cfg, const std::string& arch, bool dropUnused);

// What the GPU map calls the parts of `arch`'s model (FamilyDescription::mapParts);
// none for a family that is not registered.
QVector<MapPartView> mapPartsOf(const std::string& arch);

}  // namespace strata::ui::backend
