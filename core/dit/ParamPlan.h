#pragma once
// The per-block parameter plan of a DiT (FLUX.1 and FLUX.2), counted from its
// layout (dit/ModuleSpec.h) without building it, and the FLOPs of one LoRA
// training step counted from that plan. The plan structs are FLUX.1's, moved
// here unchanged so FLUX.2 uses them without including FLUX.1.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dit/ModuleSpec.h"

namespace strata::dit {

// One Linear of the model, by its diffusers module path.
struct FluxLinearShape {
  std::string path;  // "transformer_blocks.0.attn.to_q"
  int64_t inFeatures = 0;
  int64_t outFeatures = 0;
  bool bias = true;
};

// One placement unit's parameters: "stem", "transformer_blocks.N",
// "single_transformer_blocks.N" or "head" (ids equal nn::BlockSlot::id).
struct FluxBlockParams {
  std::string id;
  std::string kind;  // "stem", "double", "single", "head"
  int64_t paramCount = 0;
  std::vector<FluxLinearShape> linears;  // every Linear in it, in the model's order
};

struct FluxParamPlan {
  FluxBlockParams stem;
  std::vector<FluxBlockParams> blocks;  // double blocks, then single blocks
  FluxBlockParams head;
  int64_t totalParams() const;
};

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
