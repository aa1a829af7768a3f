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
#include <deque>
#include <functional>
#include <map>

#include <c10/util/intrusive_ptr.h>

#include "nn/Block.h"

namespace strata::train {

class CheckpointedRunner final : public nn::BlockRunner {
 public:
  // `inner` must outlive this runner and every graph built through it.
  // `offloadInputs` (train.offload_checkpoints): the image and text tokens each
  // block saves for its recompute are copied to pinned host memory and brought
  // back in the backward, so only the block being recomputed holds them on the
  // GPU. CPU tensors are kept as they are. The host copies live in slots the
  // runner keeps, one per block and field, reused by every step: a recorded CUDA
  // graph copies into the same host memory on each replay.
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
  // Block `blockIndex`'s field `field` in host memory: the slot, (re)made to `like`'s
  // shape and dtype outside a recording.
  const at::Tensor& hostSlot(size_t blockIndex, size_t field, const at::Tensor& like);
  // Lets the current stream wait for the host copies made before the newest
  // `keepBlocks` block forwards (the current one included), and drops their inputs:
  // their card memory is then reused in stream order.
  void releaseCopied(int64_t keepBlocks);
  std::map<std::pair<size_t, size_t>, at::Tensor> hostSlots_;
  struct Pending {
    at::Tensor onCard;
    std::function<void()> waitForCopy;  // makes the current stream wait for the host copy
    int64_t forward = 0;                // which block forward copied it (forwards_ then)
  };
  int64_t forwards_ = 0;  // checkpointed block forwards so far
  // The last block forward of the current pass (offload only): the next one links to it,
  // so that its backward can start this one's copies back. Cleared by the pass's backward.
  c10::intrusive_ptr<c10::intrusive_ptr_target> lastForward_;
  std::deque<Pending> pending_;  // inputs whose host copy the current stream has not waited for
  friend struct CheckpointFunction;
};

}  // namespace strata::train
