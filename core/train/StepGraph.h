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
// validator refuses with cuda_graph: true what changes those between steps (fp16's
// loss scale, a checkpointed block's host-side random state where LoRA dropout
// draws, checkpoint offload's per-step host buffers), and auto leaves the graph off
// there; the trainer drops the graph when a micro-batch of other shapes comes.
// Random draws on the card (LoRA dropout) advance on every replay, as they do
// without the graph.
//
// Gradients: with one micro-batch a step (no accumulation) the graph records its
// backward with no gradient there, so autograd's AccumulateGrad keeps the tensor the
// backward computed (in the graph's pool) as the gradient, and each replay writes
// it anew: no zeroing and no add per trained tensor (about 840 kernels a FLUX.1
// step). With accumulation (train.gradient_accumulation_steps) the graph records
// with each gradient already there (zeros, allocated outside the graph's pool), so
// the recorded backward adds into it in place as AccumulateGrad does; each step
// zeroes them once (startStep) and replays once per micro-batch, so the micro-batches
// sum as the eager steps do. A trained tensor the recorded backward does not reach
// keeps no gradient, as in an eager step.
//
// Memory: the recorded step's activations live in the graph's own pool, reserved
// from the recording until reset(); the caching allocator's other cached memory
// is returned to the driver before recording, so the two do not sit side by side.
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/RunConfig.h"

namespace strata::train {

// What train.cuda_graph meets on a run beside its config (Trainer::startStepGraph).
struct StepGraphSituation {
  bool cudaBuild = false;            // StepGraph::available()
  std::vector<c10::Device> devices;  // the model's (a data-parallel rank's: its one card)
  // FamilyRun::microBatchShapeChange(): "" where every micro-batch has one shape.
  std::string shapeChange;
};

struct StepGraphDecision {
  bool record = false;  // the trainer records the step and replays it
  std::string why;      // why it does not ("" where it does, or with cuda_graph: false)
  // How `why` is said, once: cuda_graph: true that cannot apply warns; auto puts it in
  // the run's setup line, and says nothing on a CPU run or a build without CUDA.
  enum class Say { Nothing, SetupLine, Warning } say = Say::Nothing;
};

// auto: the graph where it applies (one CUDA card, no config conflict
// (config::cudaGraphConflicts), micro-batches of one shape), else eager with the
// reason. true: the graph wherever the machine allows it (shapes are not judged
// beforehand: a micro-batch of other shapes drops it). false: never.
StepGraphDecision decideStepGraph(const config::RunConfig& cfg, const StepGraphSituation& situation);

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

  // Records lossFn(copies of batch) and the backward of its loss / lossDivisor (the
  // accumulation's micro-batch count, as the eager step divides) on a side stream of
  // the batch's card; nothing runs until replay(). The batch's tensors must all be on
  // one CUDA device. `params` (the trained tensors) must have no gradient. With a
  // divisor of 1 (one micro-batch a step) each replay writes the gradients; otherwise
  // they are added into, and after record() those the backward reaches have the
  // graph's gradients, zeroed (startStep). Throws
  // strata::Error with the cause where recording fails (an op that waits for the
  // device, a CPU tensor); the graph is then empty, `params` have no gradient, and
  // the card goes on as before.
  void record(const std::vector<at::Tensor>& batch, const LossFn& lossFn, const std::vector<at::Tensor>& params,
              double lossDivisor);

  // Before a step's first replay: where the graph adds into its gradients, gives
  // `params` them again (the reducer may have pointed them elsewhere) and zeroes them,
  // in one op; where it writes them, takes the gradients off `params`, as an eager
  // step's zero_grad does (a step that drops the graph before its replay then runs
  // eagerly from none).
  void startStep(const std::vector<at::Tensor>& params);

  // Copies `batch` (fits() holds) into the recorded inputs and replays on the current
  // stream: the recorded gradients grow by this micro-batch's, or are written (one
  // micro-batch a step); `params` (the recorded ones) then hold them. Returns a copy
  // of its loss (the graph's own tensor is overwritten by the next replay).
  at::Tensor replay(const std::vector<at::Tensor>& batch, const std::vector<at::Tensor>& params);

  // Drops the graph and returns its memory. Where it added into gradients
  // (allocated outside the graph's pool) the trained tensors keep them: a step that
  // drops the graph part-way adds its remaining micro-batches to them eagerly. Where
  // it wrote them (in its pool) they go with it: the step is whole by then (sampling
  // drops the graph after the optimizer step; a shape change drops it before the
  // step's only replay).
  void reset();

 private:
  // Gives `params` the graph's gradients (none where the backward does not reach one).
  void attachGradients(const std::vector<at::Tensor>& params);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::train
