#pragma once
// The modules of a FLUX transformer, unit by unit (stem, double block, single
// block, head): the one description the model is built from (FluxTransformer),
// the planner's per-block plan is counted from (fluxParamPlan) and the name rules
// take their row counts from (FluxNames). Pure: no tensors.
#include <cstdint>
#include <string>
#include <vector>

#include "models/flux/FluxConfig.h"

namespace strata::flux {

struct FluxModuleSpec {
  enum class Type { Linear, RmsNorm };
  // Inside a block relative to it ("attn.to_q"); in the stem and head the model path ("x_embedder").
  std::string path;
  Type type = Type::Linear;
  int64_t inFeatures = 0;   // RmsNorm: its dim
  int64_t outFeatures = 0;  // rows of its weight; RmsNorm: its dim
  bool bias = true;         // Linear only

  int64_t paramCount() const;
};

enum class FluxUnit { Stem, Double, Single, Head };

// The modules of one unit in the order they are built and registered, which is
// also the order the random init of a fresh model draws in and the forward order
// of the Linears.
std::vector<FluxModuleSpec> fluxUnitLayout(FluxUnit unit, const FluxConfig& cfg);

// The entry at `path` in `layout`, or null.
const FluxModuleSpec* findModuleSpec(const std::vector<FluxModuleSpec>& layout, const std::string& path);

}  // namespace strata::flux
