#pragma once
// The reduce point of an optimizer step (Trainer::trainStep): where the gradients
// of the LoRA parameters, and the step's losses with them, leave this process's
// micro-batches and become the step's. One process needs nothing there (the empty
// collective, LocalGradients); data-parallel replicas all-reduce there.
#include <ATen/ATen.h>

#include <vector>

namespace strata::train {

// What passes through the reduce point of one optimizer step.
struct StepGradients {
  // The LoRA parameters; each .grad() holds this process's gradient of the step
  // (the sum over its micro-batches of loss / micro-batches), or is undefined.
  const std::vector<at::Tensor>& params;
  // The step's micro-batch losses, detached, on their devices (not read on the host yet).
  std::vector<at::Tensor>& losses;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Called once per optimizer step, after the last micro-batch's backward and
  // before anything reads a gradient or a loss: the host's loss check, fp16's
  // overflow check and unscale, the clip and the optimizer's non-finite skip all
  // read what leaves here, so replicas that reduce gradients and losses here take
  // the same non-finite decision (skip, stop or step).
  virtual void reduce(StepGradients& step) = 0;
  // Called before the backward of a step's last micro-batch where it runs eagerly
  // (a replayed step graph runs none): a reducer that overlaps its collective with
  // the backward gets ready for the gradients as they arrive. reduce() follows.
  virtual void beforeLastBackward(const std::vector<at::Tensor>& /*params*/) {}
};

// The empty collective of a run in one process: the gradients and losses are the step's already.
class LocalGradients final : public GradientReducer {
 public:
  void reduce(StepGradients& /*step*/) override {}
};

}  // namespace strata::train
