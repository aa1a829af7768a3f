#pragma once
// A CUDA graph of one micro-batch's forward and backward (train.cuda_graph).
//
// At 512 px a FLUX.1-dev step is paced by the CPU launching its kernels one by one
// (docs/speed.md, s29-s30). Recorded once, the whole forward and backward is one launch: the
// trainer copies each step's micro-batch into the recorded input tensors and
// replays. The optimizer, the clip and the EMA stay outside the graph (a few
// launches each), so the learning rate, the step counts and host-resident moments
// work as without it.
//
// What the graph holds fixed: the shapes of the micro-batch, the kernels and the
// values the host passed them while recording (a multiplier, a loss scale). The
// validator refuses what changes those between steps (gradient checkpointing's
// host-side random state, fp16's loss scale, accumulation); the trainer drops the
// graph when a micro-batch of other shapes comes. Random draws on the card (LoRA
// dropout) advance on every replay, as they do without the graph.
//
// Memory: the recorded step's activations live in the graph's own pool, reserved
// from the recording until reset(); the caching allocator's other cached memory
// is returned to the driver before recording, so the two do not sit side by side.
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strata::train {

class StepGraph {
 public:
  using LossFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether this build can record CUDA graphs (LibTorch with CUDA).
  static bool available();

  bool recorded() const;
  // Whether `batch` has the recorded micro-batch's count, shapes, dtypes and devices.
  bool fits(const std::vector<at::Tensor>& batch) const;
  // The recorded micro-batch's shapes, for messages ("[1, 1024, 64], [1, 512, 4096], ...").
  std::string shapes() const;
  // The same text for any micro-batch.
  static std::string shapesOf(const std::vector<at::Tensor>& batch);

  // Records lossFn(copies of batch) and its backward on a side stream of the batch's
  // card; nothing runs until replay(). The batch's tensors must all be on one CUDA
  // device. `params` (the trained tensors) must have no gradient; after it their
  // gradients are the graph's tensors. Throws strata::Error with the cause where
  // recording fails (an op that waits for the device, a CPU tensor); the graph is
  // then empty, `params` have no gradient, and the card goes on as before.
  void record(const std::vector<at::Tensor>& batch, const LossFn& lossFn, const std::vector<at::Tensor>& params);

  // Copies `batch` (fits() holds) into the recorded inputs, replays on the current
  // stream and gives `params` the graph's gradients again. Returns the loss: the
  // graph's tensor, overwritten by the next replay.
  at::Tensor replay(const std::vector<at::Tensor>& batch, const std::vector<at::Tensor>& params);

  // Drops the graph and returns its memory; a gradient of `params` that is the
  // graph's is unset.
  void reset(const std::vector<at::Tensor>& params);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::train
