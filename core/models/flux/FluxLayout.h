#pragma once
// The modules of a FLUX transformer, unit by unit (stem, double block, single
// block, head), as dit::ModuleSpec rows: the one description the model is built
// from (FluxTransformer), the planner's per-block plan is counted from
// (fluxParamPlan), the loader checks a file against and the name rules take their
// row counts from (FluxNames). Pure: no tensors.
#include <vector>

#include "dit/ModuleSpec.h"
#include "models/flux/FluxConfig.h"
#include "nn/ParamPlan.h"

namespace strata::flux {

using FluxModuleSpec = dit::ModuleSpec;
using FluxUnit = dit::Unit;
using dit::findModuleSpec;

// The modules of one unit in the order they are built and registered, which is
// also the order the random init of a fresh model draws in and the forward order
// of the Linears.
std::vector<FluxModuleSpec> fluxUnitLayout(FluxUnit unit, const FluxConfig& cfg);

// fluxUnitLayout for one config, as the shared code takes it.
dit::UnitLayout fluxLayout(const FluxConfig& cfg);

}  // namespace strata::flux
