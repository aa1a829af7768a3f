#pragma once
// FLUX.1 as it describes itself (config/FamilyRegistry.h): its keys, rules and words.
#include "config/FamilyRegistry.h"

namespace strata::families {

config::FamilyDescription describeFlux();

}  // namespace strata::families
