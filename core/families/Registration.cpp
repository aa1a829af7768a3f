// The one registration of the model families (train/ModelFamily.h): model.arch
// picks one of these. Built as an object library that strata_core puts into
// every program that links it, so the registration runs before main() without
// anything calling it. A new family is a folder under core/families/ and a line here.
#include "families/flux/FluxFamily.h"
#include "families/flux2/Flux2Family.h"
#include "families/llama/LlamaFamily.h"
#include "train/ModelFamily.h"

namespace {

const bool kRegistered = [] {
  strata::train::registerModelFamily(strata::families::makeFluxFamily());
  strata::train::registerModelFamily(strata::families::makeLlamaFamily());
  strata::train::registerModelFamily(strata::families::makeFlux2Family());
  return true;
}();

}  // namespace
