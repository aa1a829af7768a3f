#pragma once
// FLUX.1 as a train::ModelFamily. A thin wrapper: the FLUX pieces of the trainer
// (model building and placement, flow-matching micro-steps, image samples, the
// LoRA file forms) are the functions of train/TrainerSupport, which it calls.
#include <memory>

#include "train/ModelFamily.h"

namespace strata::families {

std::shared_ptr<const train::ModelFamily> makeFluxFamily();

}  // namespace strata::families
