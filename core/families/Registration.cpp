// A new family is a folder under core/families/, a line here and one in descriptions/.
#include "families/Registration.h"

#include <mutex>

#include "families/descriptions/Descriptions.h"
#include "families/flux/FluxFamily.h"
#include "families/flux2/Flux2Family.h"
#include "families/llama/LlamaFamily.h"
#include "families/llama/LmDataset.h"
#include "train/ModelFamily.h"
#include "train/TextRecords.h"

namespace strata::families {

void registerAll() {
  static std::once_flag once;
  std::call_once(once, [] {
    // What each family says about itself (config keys, rules, words), then its runs.
    registerDescriptions();
    train::registerModelFamily(makeFluxFamily());
    train::registerModelFamily(makeLlamaFamily());
    train::registerModelFamily(makeFlux2Family());
    // The app's jsonl preview reads as the causal-LM trainer does, without its header.
    train::registerTextRecordReader(config::DatasetType::Jsonl, readJsonlDataset);
  });
}

}  // namespace strata::families
