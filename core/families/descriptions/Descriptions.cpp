// A new family is a folder under core/families/ with a describe/ library, and a line here.
#include "families/descriptions/Descriptions.h"

#include <mutex>

#include "config/FamilyRegistry.h"
#include "families/flux/describe/FluxDescription.h"
#include "families/flux2/describe/Flux2Description.h"
#include "families/llama/describe/LlamaDescription.h"

namespace strata::families {

void registerDescriptions() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The order is the chooser's and the order of model.arch's choices.
    config::registerFamily(describeFlux());
    config::registerFamily(describeLlama());
    config::registerFamily(describeFlux2());
  });
}

}  // namespace strata::families
