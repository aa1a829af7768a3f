// A new family is a folder under core/families/ and a line here.
#include "families/Registration.h"

#include <mutex>

#include "config/FamilyRegistry.h"
#include "families/flux/FluxDescription.h"
#include "families/flux/FluxFamily.h"
#include "families/flux2/Flux2Description.h"
#include "families/flux2/Flux2Family.h"
#include "families/llama/LlamaDescription.h"
#include "families/llama/LlamaFamily.h"
#include "train/ModelFamily.h"

namespace strata::families {

void registerAll() {
  static std::once_flag once;
  std::call_once(once, [] {
    // What each family says about itself (config keys, rules, words), then its runs;
    // the order is the chooser's and the order of model.arch's choices.
    config::registerFamily(describeFlux());
    config::registerFamily(describeLlama());
    config::registerFamily(describeFlux2());
    train::registerModelFamily(makeFluxFamily());
    train::registerModelFamily(makeLlamaFamily());
    train::registerModelFamily(makeFlux2Family());
  });
}

}  // namespace strata::families
