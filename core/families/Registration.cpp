// A new family is a folder under core/families/ and a line here.
#include "families/Registration.h"

#include <mutex>

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
    train::registerModelFamily(makeFluxFamily());
    train::registerModelFamily(makeLlamaFamily());
    train::registerModelFamily(makeFlux2Family());
    // The app's jsonl preview reads as the causal-LM trainer does, without its header.
    train::registerTextRecordReader(config::DatasetType::Jsonl, readJsonlDataset);
  });
}

}  // namespace strata::families
