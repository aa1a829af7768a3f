#pragma once
// Rules the image (DiT) families share, for their FamilyRules (config/FamilyRegistry.h):
// a family that trains on image latents calls them from its own rules. They name
// keys and dataset types, never a family.
#include "config/FamilyRegistry.h"

#include <cstddef>

namespace strata::config {

// The transformer's shape overrides (rotary axes against the head width) and a
// model path that random_weights leaves unread.
void checkTransformerShape(RuleContext& ctx);

// datasets[i] of an image family: the keys its type reads or refuses, resolution
// multiples, shapes with images.
void checkImageDataset(RuleContext& ctx, size_t i);

}  // namespace strata::config
