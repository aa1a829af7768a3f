#pragma once
// The description a DiT is built from, unit by unit (stem, double block, single
// block, head): one row per module. A model's layout rows give the modules its
// UnitBuilder makes, the per-block parameter plan the planner reads, the
// parameter names and shapes the loader checks a file against, and the row
// counts of the BFL name tables. Pure: no tensors.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/ParamPlan.h"

namespace strata::dit {

// A row (nn/ParamPlan.h): the one description every model's units are built and planned from.
using ModuleSpec = nn::ModuleSpec;
using nn::findModuleSpec;

enum class Unit { Stem, Double, Single, Head };

// A model's layout for one config: the modules of a unit in the order they are
// built and registered (also the order the random init draws in).
using UnitLayout = std::function<std::vector<ModuleSpec>(Unit)>;

// The module path of block `index` of a kind: "transformer_blocks.3", "single_transformer_blocks.0".
std::string blockId(Unit unit, int64_t index);

// Every parameter of the model (diffusers names) with its shape, from the layout:
// what a loader checks a file against before building anything.
std::vector<std::pair<std::string, std::vector<int64_t>>> layoutParams(const UnitLayout& layout, int64_t numLayers,
                                                                       int64_t numSingleLayers);

}  // namespace strata::dit
