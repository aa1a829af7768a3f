#pragma once
// The modules of a FLUX transformer, unit by unit (stem, double block, single
// block, head): the one description the model is built from (FluxTransformer),
// the planner's per-block plan is counted from (fluxParamPlan) and the name rules
// take their row counts from (FluxNames). Pure: no tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "models/flux/FluxConfig.h"
#include "nn/ParamPlan.h"

namespace strata::flux {

// A unit's rows are nn/ParamPlan.h's, the one description every family uses.
using FluxModuleSpec = nn::ModuleSpec;
using nn::findModuleSpec;

enum class FluxUnit { Stem, Double, Single, Head };

// The modules of one unit in the order they are built and registered, which is
// also the order the random init of a fresh model draws in and the forward order
// of the Linears.
std::vector<FluxModuleSpec> fluxUnitLayout(FluxUnit unit, const FluxConfig& cfg);

}  // namespace strata::flux
