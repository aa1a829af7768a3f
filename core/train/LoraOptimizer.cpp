#include "train/LoraOptimizer.h"

#include "common/Error.h"

namespace strata::train {

void LoraOptimizer::skipNextStepIfNotFinite(at::Tensor /*value*/) {
  throw Error("skipNextStepIfNotFinite: this optimizer cannot skip a step on the device");
}

}  // namespace strata::train
