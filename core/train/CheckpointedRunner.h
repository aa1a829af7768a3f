#pragma once
// Activation checkpointing per block, as a BlockRunner decorator. LibTorch's C++
// API has no torch.utils.checkpoint, so this is a custom autograd Function: the
// forward runs the block (through the wrapped runner, e.g. Placement's relay)
// without recording a graph and saves only the block's input tensors; the
// backward runs the block again with grad enabled and backpropagates through it
// re-entrantly, which accumulates the gradients of every trainable tensor the
// block used (LoRA adapters are not children of the block and need no listing)
// and returns the gradients of the inputs. Where the blocks draw random numbers
// (LoRA dropout), the RNG states (CPU and the block's CUDA devices) are saved in the
// forward and restored for the recompute, so dropout draws the same masks; where
// nothing draws they are left alone, which lets a CUDA graph record the step
// (train.cuda_graph: a generator's state cannot be set while a stream records).
#include "nn/Block.h"

namespace strata::train {

class CheckpointedRunner final : public nn::BlockRunner {
 public:
  // `inner` must outlive this runner and every graph built through it.
  // `offloadInputs` (train.offload_checkpoints): the image and text tokens each
  // block saves for its recompute are copied to pinned host memory and brought
  // back in the backward, so only the block being recomputed holds them on the
  // GPU. CPU tensors are kept as they are.
  // `blocksDrawRandom`: something in the blocks draws random numbers while training
  // (LoRA dropout above 0), so the recompute needs the forward's RNG states.
  explicit CheckpointedRunner(nn::BlockRunner& inner, bool offloadInputs = false, bool blocksDrawRandom = true);

  // Without grad mode (sampling) the block simply runs through `inner`.
  nn::BlockIO run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) override;
  nn::BlockIO toHead(const nn::BlockIO& io) override { return inner_.toHead(io); }

  // How many blocks have been recomputed in backward passes so far (tests).
  int64_t recomputeCount() const { return recomputes_; }
  // How many block inputs went to host memory so far (tests).
  int64_t offloadCount() const { return offloads_; }

 private:
  nn::BlockRunner& inner_;
  // A leaf that requires grad: it puts the Function in the graph even when no
  // block input requires grad (the first block's input comes from a frozen stem).
  at::Tensor anchor_;
  int64_t recomputes_ = 0;
  bool offloadInputs_ = false;
  bool blocksDrawRandom_ = true;
  int64_t offloads_ = 0;
  friend struct CheckpointFunction;
};

}  // namespace strata::train
