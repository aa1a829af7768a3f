#include "placement/MeasureBlocks.h"

#include "nn/Linear.h"

namespace strata::placement {

namespace {

UnitShape measure(const nn::BlockSlot& slot, bool isBlock, const std::function<bool(const std::string&)>& loraTarget) {
  UnitShape u;
  u.id = slot.id;
  u.kind = slot.kind;
  u.isBlock = isBlock;
  for (const auto& nm : slot.modules) {
    if (!nm.module) continue;
    for (const auto& p : nm.module->parameters(true)) u.paramCount += p.numel();
    for (const auto& item : nm.module->named_modules(nm.path)) {
      auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value());
      if (lin && loraTarget && loraTarget(item.key())) {
        u.loraLinears.push_back(LinearShape{lin->inFeatures(), lin->outFeatures()});
      }
    }
  }
  return u;
}

}  // namespace

ModelShapes measureBlocks(const nn::BlockList& list, const std::function<bool(const std::string&)>& loraTarget) {
  ModelShapes s;
  s.stem = measure(list.stem, false, loraTarget);
  for (const auto& b : list.blocks) s.blocks.push_back(measure(b, true, loraTarget));
  s.head = measure(list.head, false, loraTarget);
  return s;
}

}  // namespace strata::placement
