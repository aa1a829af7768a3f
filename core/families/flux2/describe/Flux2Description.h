#pragma once
// FLUX.2 as it describes itself (config/FamilyRegistry.h): the FLUX.1 keys it reads, its rules and words.
#include "config/FamilyRegistry.h"

namespace strata::families {

config::FamilyDescription describeFlux2();

}  // namespace strata::families
