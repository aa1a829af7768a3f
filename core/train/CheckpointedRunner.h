#pragma once
// Activation checkpointing per block, as a BlockRunner decorator. LibTorch's C++
// API has no torch.utils.checkpoint, so this is a custom autograd Function: the
// forward runs the block (through the wrapped runner, e.g. Placement's relay)
// without recording a graph and saves only the block's input tensors; the
// backward runs the block again with grad enabled and backpropagates through it
// re-entrantly, which accumulates the gradients of every trainable tensor the
// block used (LoRA adapters are not children of the block and need no listing)
// and returns the gradients of the inputs. RNG states (CPU and the block's CUDA
// device) are restored for the recompute, so dropout draws the same masks.
#include "nn/Block.h"

namespace strata::train {

class CheckpointedRunner final : public nn::BlockRunner {
 public:
  // `inner` must outlive this runner and every graph built through it.
  // `offloadInputs` (train.offload_checkpoints): the image and text tokens each
  // block saves for its recompute are copied to pinned host memory on a side
  // stream and brought back in the backward, so only the block being recomputed
  // (and the next one, whose inputs are prefetched while it computes) holds them
  // on the GPU. CPU tensors are kept as they are.
  explicit CheckpointedRunner(nn::BlockRunner& inner, bool offloadInputs = false);
  ~CheckpointedRunner() override;

  // Without grad mode (sampling) the block simply runs through `inner`.
  nn::BlockIO run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) override;
  nn::BlockIO toHead(const nn::BlockIO& io) override { return inner_.toHead(io); }

  // How many blocks have been recomputed in backward passes so far (tests).
  int64_t recomputeCount() const { return recomputes_; }
  // How many block inputs went to host memory so far (tests).
  int64_t offloadCount() const { return offloads_; }
  // How many backward recomputes started the next block's copy back early (tests).
  int64_t prefetchCount() const { return prefetches_; }

 private:
  nn::BlockRunner& inner_;
  // A leaf that requires grad: it puts the Function in the graph even when no
  // block input requires grad (the first block's input comes from a frozen stem).
  at::Tensor anchor_;
  int64_t recomputes_ = 0;
  bool offloadInputs_ = false;
  int64_t offloads_ = 0;
  int64_t prefetches_ = 0;
  bool prefetch_ = true;  // STRATA_OFFLOAD_PREFETCH=0 turns the prefetch off
  // The CheckpointCallState of the block run last with offloaded inputs: the next
  // one links to it (prefetch). Typed as its base, which this header can name.
  c10::weak_intrusive_ptr<c10::intrusive_ptr_target> lastOffloaded_;
  friend struct CheckpointFunction;
};

}  // namespace strata::train
