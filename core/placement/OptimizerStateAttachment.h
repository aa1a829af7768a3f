#pragma once
// The Adam/AdamW state of one parameter as a placement attachment, so the state
// follows its parameter when Placement moves the block (docs/design.md §2.2). LibTorch
// keys optimizer state by the parameter's TensorImpl; Module::to keeps that impl
// (it sets the data in place), so the key stays valid across moves. Until the
// first step there is no state and the attachment holds no tensors. With
// `inHostMemory` (train.offload_optimizer_state) the state lives in host memory
// whatever its block's device, pinned when that is CUDA; the optimizer stages it
// to the card for its step (train/FusedAdamW).
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

#include "placement/Attachment.h"

namespace strata::placement {

// "optimizer_state".
const AttachmentKind& optimizerStateKind();

// An optimizer state of Strata's own (e.g. train/AdamW8bit's 8-bit moments): it
// names and moves its tensors itself. The attachment handles LibTorch's Adam and
// AdamW states directly and any state that also derives from this.
class SelfDescribingOptimizerState {
 public:
  virtual ~SelfDescribingOptimizerState() = default;
  // Its tensors, named (empty before the first step).
  virtual std::vector<std::pair<std::string, at::Tensor>> stateTensors() const = 0;
  virtual void moveStateTo(const c10::Device& device) = 0;
};

class OptimizerStateAttachment final : public Attachment {
 public:
  // `paramPath`: the parameter's path ("transformer_blocks.3.attn.to_q.lora_A.weight");
  // decides the owning block. The optimizer is kept alive by the attachment.
  OptimizerStateAttachment(std::string paramPath, std::shared_ptr<torch::optim::Optimizer> optimizer, at::Tensor param,
                           bool inHostMemory = false);

  AttachmentKind kind() const override { return optimizerStateKind(); }
  std::string hostPath() const override { return paramPath_; }
  // exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad) once the state exists;
  // a SelfDescribingOptimizerState's own tensors.
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override;
  // The block's device; in host memory: the CPU, pinned when the block is on CUDA.
  Residence residence(const c10::Device& blockDevice) const override;
  void moveTo(const c10::Device& device) override;
  bool inHostMemory() const { return inHostMemory_; }

  // One attachment per named parameter.
  static std::vector<std::shared_ptr<Attachment>> forParameters(
      const std::shared_ptr<torch::optim::Optimizer>& optimizer,
      const std::vector<std::pair<std::string, at::Tensor>>& namedParams, bool inHostMemory = false);

 private:
  torch::optim::OptimizerParamState* state() const;
  std::string paramPath_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  at::Tensor param_;
  bool inHostMemory_ = false;
};

}  // namespace strata::placement
