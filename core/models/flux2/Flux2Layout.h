#pragma once
// The modules of a FLUX.2 transformer, unit by unit (stem, double block, single
// block, head), in nn::ModuleSpec rows (nn/ParamPlan.h): the one description
// the model is built from (Flux2Transformer, through flux::UnitBuilder), the
// planner's per-block plan is counted from and the name rules take their shapes
// from. Pure: no tensors. No Linear has a bias.
#include <vector>

#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLayout.h"
#include "models/flux2/Flux2Config.h"
#include "nn/ParamPlan.h"

namespace strata::flux2 {

using flux::FluxModuleSpec;
using flux::FluxUnit;

// The modules of one unit in diffusers' registration order.
std::vector<FluxModuleSpec> flux2UnitLayout(FluxUnit unit, const Flux2Config& cfg);

// Per-block parameter counts and Linear shapes ("stem", "transformer_blocks.N",
// "single_transformer_blocks.N", "head"), counted from the layout.
nn::ParamPlan flux2ParamPlan(const Flux2Config& cfg);

}  // namespace strata::flux2
