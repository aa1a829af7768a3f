#pragma once
// The reduce point of a data-parallel run (train/GradientReducer.h): every LoRA
// gradient and every micro-batch loss averaged over the ranks, once per optimizer
// step (with gradient accumulation, at its boundary only). Each rank's gradient
// and losses are the means over its share of the global batch, which is the same
// size on every rank, so their average is the global batch's: the step is the one
// a single process would take on the whole batch. A non-finite value on any rank
// makes the average non-finite on all, so every rank takes the same decision.
#include <memory>

#include "train/Collective.h"
#include "train/GradientReducer.h"

namespace strata::dist {

class AveragingReducer final : public train::GradientReducer {
 public:
  explicit AveragingReducer(std::shared_ptr<train::Collective> collective) : collective_(std::move(collective)) {}
  void reduce(train::StepGradients& step) override;

 private:
  std::shared_ptr<train::Collective> collective_;
};

}  // namespace strata::dist
