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
//
// State in host memory (train.offload_optimizer_state): the moments of a CUDA
// parameter live in pinned host memory; each step copies them to the card in chunks
// of at most stagingChunkBytes() of moments (so the card never holds all of them),
// runs the same kernel on the staged copies and copies them back. A chunk's moments are
// packed back to back into one host buffer (the state's tensors become views of it), so
// a chunk is one copy each way, not one per tensor. On CUDA two staging slots alternate:
// a chunk's copy back runs on a side stream beside the next chunk's copy in, and the
// last ones past step(), beside the next forward. finishCopiesBack() waits for them;
// the next step(), the state's save and load (train/OptimizerState) and the destructor
// call it.
#include <torch/optim/adamw.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "placement/Planner.h"
#include "train/LoraOptimizer.h"

namespace strata::train {

class FusedAdamW : public LoraOptimizer {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {})
      : LoraOptimizer(std::move(params), std::move(defaults)) {}
  ~FusedAdamW() override;

  at::Tensor step(LossClosure closure = nullptr) override;

  // Waits until the last step's copies of host-memory moments back from the card have
  // landed; the host may read or replace those moments after it. Cheap when they ran
  // beside the forward that came after.
  void finishCopiesBack();
  // Whether copies back are still to be waited for (for tests).
  bool copiesBackPending() const { return !copiesBackPending_.empty(); }

  // How the last step updated its tensors: "fused", "foreach", "per-tensor"
  // (amsgrad) or "" before the first step; for tests and the bench.
  const std::string& lastPath() const { return lastPath_; }
  // Set false to keep the foreach path on CUDA too (tests compare the two).
  void setAllowFused(bool allow) { allowFused_ = allow; }

  static constexpr int64_t kDefaultStagingChunkBytes = placement::kOptimizerStagingChunkBytes;
  // New moments of a CUDA parameter go to pinned host memory (a CPU parameter's stay
  // with it); moments on another device than their parameter are staged each step.
  void setStateInHostMemory(bool inHost) { stateInHostMemory_ = inHost; }
  bool stateInHostMemory() const override { return stateInHostMemory_; }
  // Moments staged at a time (exp_avg and exp_avg_sq together); a tensor larger than
  // this is staged alone. Throws Error for a value < 1.
  void setStagingChunkBytes(int64_t bytes);
  int64_t stagingChunkBytes() const { return stagingChunkBytes_; }
  // Tests without CUDA: stage the moments of CPU parameters as well (CPU to CPU), so
  // the chunked path runs and can be compared with the direct one.
  void setStageOnSameDevice(bool stage) { stageOnSameDevice_ = stage; }
  // How many chunks the last step staged (0: none); for tests and the bench.
  int64_t lastStagedChunks() const { return lastStagedChunks_; }

  // Whether the next step() takes the fused kernel for every parameter (CUDA,
  // LibTorch 2.1+, float types, no amsgrad): only that path can skip on the device.
  bool canSkipOnDevice() const override;
  // The next step() leaves every parameter and moment as it is where `value` (a
  // scalar, e.g. the gradient norm still being computed) is not finite, decided on
  // the device, so the host need not wait for `value` before queuing the step.
  // Only with canSkipOnDevice(); the step counts still advance (the caller stops
  // the run on a non-finite value).
  void skipNextStepIfNotFinite(at::Tensor value) override;

 private:
  std::string lastPath_;
  bool allowFused_ = true;
  at::Tensor skipIfNotFinite_;
  bool stateInHostMemory_ = false;
  bool stageOnSameDevice_ = false;
  int64_t stagingChunkBytes_ = kDefaultStagingChunkBytes;
  int64_t lastStagedChunks_ = 0;
  // The waits for the copies back the last step left running (CUDA events).
  std::vector<std::function<void()>> copiesBackPending_;
};

// Consecutive ranges [begin, end) of `bytes` (moment bytes per tensor, in order),
// each summing to at most `limit`, or a single tensor larger than it.
std::vector<std::pair<size_t, size_t>> stagingChunks(const std::vector<int64_t>& bytes, int64_t limit);

// Whether this LibTorch has the fused AdamW kernel for `device` (CUDA, 2.1+).
bool fusedAdamWAvailable(const c10::Device& device);

}  // namespace strata::train
