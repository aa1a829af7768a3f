#pragma once
// What a model family says about itself (DESIGN §2b), as data config/, ui/,
// placement/ and train/ read instead of switching on a family: its id (model.arch's
// spelling), its names, the config keys it contributes (one row each, KeyRow), the
// shared keys it reads in its own words, its cross-key rules (the validator calls
// them), the dataset types and LoRA forms it takes, the GPU map's words for its
// parts, and what the trainer asks of it.
//
// config/ links no family: strata::families::registerAll() (core/families/
// Registration.h) fills this registry, next to train::registerModelFamily.
#include "config/ConfigSchema.h"
#include "config/Problem.h"
#include "config/RunConfig.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata::config {

struct ValidateOptions;

// One key a family contributes: its row, and the key it follows in the saved YAML
// and the form (a key not in the schema, e.g. another family's that is not
// registered: the row goes to the end of its section).
struct KeyRow {
  KeySpec spec;
  std::string after;
};

// What a family's rules see of the validator: the config, the options, and how to
// report. Lines ("(line 12)") come from the options' SourceMap.
class RuleContext {
 public:
  virtual ~RuleContext() = default;
  virtual const RunConfig& config() const = 0;
  virtual const ValidateOptions& options() const = 0;
  virtual void error(const std::string& key, std::string message, std::string hint = "") = 0;
  virtual void warning(const std::string& key, std::string message, std::string hint = "") = 0;
  // " (line 12)" when `key` was written in the file, else "".
  virtual std::string lineOf(const std::string& key) const = 0;
  // Whether any dataset is an images dataset.
  virtual bool hasImages() const = 0;
};

// A family's cross-key rules, each called by the validator at its place in the
// order of the problems (any may be empty).
struct FamilyRules {
  std::function<void(RuleContext&)> arch;             // first of the model rules, before the keys it does not read
  std::function<void(RuleContext&)> model;            // model keys (shapes, single files, preset)
  std::function<void(RuleContext&)> paths;            // with checkPaths, before model.name_or_path's own check
  std::function<void(RuleContext&)> modelPath;        // with checkPaths, after it (what the folder must hold)
  std::function<void(RuleContext&, size_t)> dataset;  // each datasets[i] (the family's dataset types and keys)
  std::function<void(RuleContext&)> sampling;         // after sample.prompts' check
};

// The words a shared rule says in the family's terms.
struct FamilyHints {
  std::string modelFolder;    // where model.name_or_path should point
  std::string modelNotFound;  // what to give when it does not exist
  std::string lr;             // a usual learning rate
  std::string noDataset;      // an example dataset
  std::string noExport;       // the formats to add
  // A save.export_formats entry the family does not write: "{format}" is its name.
  std::string foreignFormat;
  std::string foreignFormatHint;
};

// How the GPU map names one part of the family's model: the stem, the head or one
// of its block kinds (nn::BlockSlot::kind), in the family's words. The map draws
// these and guesses nothing.
struct MapPart {
  std::string kind;    // "stem", "head", or a block kind the family's plan uses ("double", "layer")
  std::string row;     // a row's name: a block's is this and its index ("double 3"), the stem's and head's this alone
  std::string tip;     // what the block's tooltip calls it: "double", "decoder layer", "stem: embedding"
  std::string legend;  // its line in the map's legend: "double block", "decoder layer", "head: norm + lm_head"
};

struct FamilyDescription {
  std::string id;                      // "flux": model.arch's spelling
  std::string displayName;             // "FLUX.1"
  std::string title;                   // what a run trains, for the chooser: "FLUX.1 image LoRA"
  std::vector<KeyRow> keys;            // the keys the family contributes
  std::vector<std::string> alsoReads;  // other families' keys it reads too ("model.num_layers")
  // model.preset's names for this family's shapes; the first is what random
  // weights build when none is set. Empty: the family reads no model.preset.
  std::vector<std::string> presets;
  // A key's doc in the family's words: a shared key's, or one of alsoReads' where the other
  // family's words do not hold for this one (FLUX.1's T5 width is FLUX.2's stacked text layers).
  std::map<std::string, std::string> keyDocs;
  // The dataset types and LoRA forms it takes, the first being the one a switch to it sets.
  std::vector<DatasetType> datasetTypes;
  std::vector<ExportFormat> exportFormats;
  // Further forms save.export_formats may name without an error (a causal LM's
  // diffusers: the same peft folder); the app does not offer them.
  std::vector<ExportFormat> acceptedFormats;
  FamilyHints hints;
  // The GPU map's words for the stem, the head and each block kind, in the legend's order.
  std::vector<MapPart> mapParts;
  FamilyRules rules;
  // Capabilities the trainer and the validator ask about.
  bool cudnnAttention = true;                // may use cuDNN's fused attention (model.attention_backend: cudnn)
  bool readsModelWithRandomWeights = false;  // model.name_or_path is read even with random_weights (config.json)
};

// Registers `family` under its id (a second registration of an id replaces the
// first); called by strata::families::registerAll(). The schema is rebuilt with
// its rows the next time it is asked for.
void registerFamily(FamilyDescription family);
// Removes the family registered as `id` (a test's own family); nothing when there is none.
void unregisterFamily(const std::string& id);
// The family registered as `id`, or nullptr. The pointer stays valid until `id` is
// registered again or unregistered.
const FamilyDescription* findFamily(const std::string& id);
// The family registered as `id`. Throws ConfigError naming model.arch and the
// registered ids when there is none.
const FamilyDescription& family(const std::string& id);
// Their ids, in registration order: model.arch's choices.
std::vector<std::string> familyIds();
// Every registered family, in registration order.
std::vector<const FamilyDescription*> families();
// "flux, llama, flux2" (for messages), or "none".
std::string familyIdList();
// Every registered family's model.preset names, each once, in registration order:
// model.preset's choices (beside "", from the weights).
std::vector<std::string> presetNames();
// The family whose presets hold `preset`, or null.
const FamilyDescription* familyOfPreset(const std::string& preset);

// A key set away from its default that `family` does not read: the concrete key
// ("datasets[0].folder_path"), its row and its value. The validator says each is
// ignored; the app lists them and drops them on a family switch. Keys marked
// quietElsewhere (model.is_flux) are left out.
struct UnreadKey {
  std::string key;
  const KeySpec* spec = nullptr;
  size_t datasetIndex = 0;
  Value value;
};
std::vector<UnreadKey> keysNotRead(const RunConfig& cfg, const std::string& family);

}  // namespace strata::config
