#pragma once
// Planner shapes from a live model: parameter counts and the Linears that get a
// LoRA adapter, per block. For the trainer, which has the model built; the
// `plan` command uses the model family's shape function instead (no weights).
#include <functional>
#include <string>
#include <vector>

#include "nn/Block.h"
#include "placement/Planner.h"

namespace strata::placement {

struct ModelShapes {
  UnitShape stem;
  std::vector<UnitShape> blocks;
  UnitShape head;
};

// `loraTarget(modulePath)` says whether the nn::Linear at that path gets an
// adapter; null = none does.
ModelShapes measureBlocks(const nn::BlockList& list, const std::function<bool(const std::string&)>& loraTarget);

}  // namespace strata::placement
