#pragma once
// The modules of a FLUX.2 transformer, unit by unit (stem, double block, single
// block, head), as dit::ModuleSpec rows: the one description the model is built
// from (Flux2Transformer, through dit::UnitBuilder), the planner's per-block plan
// is counted from, the loader checks a file against and the name rules take their
// shapes from. Pure: no tensors. No Linear has a bias.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dit/ModuleSpec.h"
#include "dit/ParamPlan.h"
#include "models/flux2/Flux2Config.h"
#include "nn/ParamPlan.h"

namespace strata::flux2 {

using FluxModuleSpec = dit::ModuleSpec;
using FluxUnit = dit::Unit;

// The modules of one unit in diffusers' registration order.
std::vector<FluxModuleSpec> flux2UnitLayout(FluxUnit unit, const Flux2Config& cfg);

// Per-block parameter counts and Linear shapes ("stem", "transformer_blocks.N",
// "single_transformer_blocks.N", "head"), counted from the layout.
dit::FluxParamPlan flux2ParamPlan(const Flux2Config& cfg);

// flux2UnitLayout for one config, as the shared code takes it.
dit::UnitLayout flux2Layout(const Flux2Config& cfg);

// FLOPs of one LoRA training step (dit::trainStepFlops): the timestep / guidance
// embedders, the shared modulation and norm_out.linear see one vector per sample.
double flux2TrainStepFlops(const Flux2Config& cfg, int64_t batch, int64_t imageTokens, int64_t textTokens,
                           int64_t loraRank, const std::function<bool(const std::string&)>& hasLora);

}  // namespace strata::flux2
