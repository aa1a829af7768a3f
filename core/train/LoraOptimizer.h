#pragma once
// The optimizer of a run's LoRA parameters: torch's AdamW with what the trainer
// asks of it beyond step(), so the step needs no cast to a concrete optimizer.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <utility>
#include <vector>

namespace strata::train {

class LoraOptimizer : public torch::optim::AdamW {
 public:
  LoraOptimizer(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults)
      : torch::optim::AdamW(std::move(params), std::move(defaults)) {}

  // Whether the next step() can be skipped on the device where a value is not
  // finite (skipNextStepIfNotFinite), so the host need not wait for the value
  // before queuing the step. None can by default.
  virtual bool canSkipOnDevice() const { return false; }
  // The next step() leaves every parameter and moment as it is where `value` (a
  // scalar still being computed on the device) is not finite. Only where
  // canSkipOnDevice(); throws Error otherwise.
  virtual void skipNextStepIfNotFinite(at::Tensor value);
  // Whether the moments live in pinned host memory (their copies back from the
  // card run past step()).
  virtual bool stateInHostMemory() const { return false; }
};

}  // namespace strata::train
