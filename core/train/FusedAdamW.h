#pragma once
// AdamW with the same update and the same state as torch::optim::AdamW, done over
// all parameters at once instead of parameter by parameter: LibTorch's AdamW runs
// ~10 small kernels per tensor, ~10,000 launches a step for the ~1,000 LoRA tensors
// of FLUX. On CUDA with LibTorch 2.1+ one fused kernel (at::_fused_adamw_) per
// device and dtype does it; elsewhere the foreach ops (a few launches per list).
//
// The state stays torch::optim::AdamWParamState in the optimizer's state map
// (step count, exp_avg, exp_avg_sq), so the checkpoint code (train/OptimizerState)
// and the placement attachment (placement/OptimizerStateAttachment) see no
// difference. amsgrad is not fused: a group with it takes AdamW's own step.
#include <torch/optim/adamw.h>

#include <string>
#include <vector>

namespace strata::train {

class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {})
      : torch::optim::AdamW(std::move(params), std::move(defaults)) {}

  at::Tensor step(LossClosure closure = nullptr) override;

  // How the last step updated its tensors: "fused", "foreach", "per-tensor"
  // (amsgrad) or "" before the first step; for tests and the bench.
  const std::string& lastPath() const { return lastPath_; }
  // Set false to keep the foreach path on CUDA too (tests compare the two).
  void setAllowFused(bool allow) { allowFused_ = allow; }

  // Whether the next step() takes the fused kernel for every parameter (CUDA,
  // LibTorch 2.1+, float types, no amsgrad): only that path can skip on the device.
  bool canSkipOnDevice() const;
  // The next step() leaves every parameter and moment as it is where `value` (a
  // scalar, e.g. the gradient norm still being computed) is not finite, decided on
  // the device, so the host need not wait for `value` before queuing the step.
  // Only with canSkipOnDevice(); the step counts still advance (the caller stops
  // the run on a non-finite value).
  void skipNextStepIfNotFinite(at::Tensor value);

 private:
  std::string lastPath_;
  bool allowFused_ = true;
  at::Tensor skipIfNotFinite_;
};

// Whether this LibTorch has the fused AdamW kernel for `device` (CUDA, 2.1+).
bool fusedAdamWAvailable(const c10::Device& device);

}  // namespace strata::train
