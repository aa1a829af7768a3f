#pragma once
// The per-block parameter plan of a DiT (FLUX.1 and FLUX.2), counted from its
// layout (dit/ModuleSpec.h) without building it, and the FLOPs of one LoRA
// training step counted from that plan. The plan is nn's (nn/ParamPlan.h).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dit/ModuleSpec.h"
#include "nn/ParamPlan.h"

namespace strata::dit {

// The plan structs under FLUX's names (nn/ParamPlan.h holds the one description).
using FluxLinearShape = nn::LinearShape;
using FluxBlockParams = nn::UnitPlan;
using FluxParamPlan = nn::ParamPlan;

// Whether the Linear at `path` (a plan path) is a modulation: it reads the
// conditioning vector [B, hidden] (one token per sample), which needs no gradient
// while the stem is frozen. FLUX.1 and FLUX.2 name them alike.
bool isModulationLinear(const std::string& path);

// Per-block parameter counts and Linear shapes, counted from the layout the model
// is built from, so they equal the built model's named_parameters() by construction.
FluxParamPlan paramPlanOf(const UnitLayout& layout, int64_t numLayers, int64_t numSingleLayers);

// FLOPs of one LoRA training step of the frozen base (the model's FLOPs, not
// counting a checkpointed block's recompute): every Linear 2 x tokens x in x out
// forward and the same again for the input gradient (the base has no weight
// gradient); a LoRA of rank r on a Linear 6 x tokens x r (in + out) (forward,
// input and weight gradients); attention per block 4 x L^2 x hidden forward and
// 8 x L^2 x hidden backward (L = image + text tokens). A Linear sees one vector per
// sample where `perSample(path)` (timestep embedders, modulations), else the image
// and text tokens (single blocks), the text tokens (the text stream's Linears) or
// the image tokens. `hasLora` says which paths carry an adapter (empty: none).
double trainStepFlops(const FluxParamPlan& plan, int64_t hiddenSize, int64_t batch, int64_t imageTokens,
                      int64_t textTokens, int64_t loraRank, const std::function<bool(const std::string&)>& perSample,
                      const std::function<bool(const std::string&)>& hasLora);

}  // namespace strata::dit
