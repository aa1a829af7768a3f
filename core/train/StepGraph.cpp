#include "train/StepGraph.h"

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/TorchCompat.h"
#include "config/Validator.h"

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace strata::train {

struct StepGraph::Impl {
#ifdef STRATA_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  std::vector<at::Tensor> inputs;  // the recorded micro-batch: each step's is copied in
  at::Tensor loss;                 // the recorded loss (float32, 0-dim)
  // Per parameter, the gradient the graph adds into or writes (undefined: not reached).
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> reached;  // the defined ones of `grads`: zeroed at each step's start where the graph adds
  bool writes = false;              // one micro-batch a step: each replay writes `grads` (in the graph's pool)
  std::vector<at::Tensor> params;   // where it writes: the recorded trained tensors, whose gradients reset() drops
};

StepGraphDecision decideStepGraph(const config::RunConfig& cfg, const StepGraphSituation& situation) {
  using Say = StepGraphDecision::Say;
  StepGraphDecision d;
  const auto mode = cfg.train.cudaGraph;
  if (mode == config::CudaGraphMode::Off) return d;
  const bool asked = mode == config::CudaGraphMode::On;
  const auto& devices = situation.devices;
  auto off = [&](std::string why, Say say) {
    d.why = std::move(why);
    d.say = asked ? Say::Warning : say;
    return d;
  };
  if (!situation.cudaBuild) return off("this build's LibTorch has no CUDA", Say::Nothing);
  if (devices.empty() || !devices.front().is_cuda()) return off("the run is not on a CUDA card", Say::Nothing);
  if (devices.size() > 1)
    return off("the model is split over " + std::to_string(devices.size()) +
                   " devices, and a graph records the work of one card (one graph per card is not built)",
               Say::SetupLine);
  const auto conflicts = config::cudaGraphConflicts(cfg);
  if (!conflicts.empty())
    return off("not with " + conflicts.front().setting + ": " + conflicts.front().why, Say::SetupLine);
  if (!asked && !situation.shapeChange.empty())
    return off(situation.shapeChange + " (a graph replays one shape)", Say::SetupLine);
  d.record = true;
  return d;
}

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}
StepGraph::~StepGraph() = default;

bool StepGraph::available() {
#ifdef STRATA_HAS_CUDA
  return true;
#else
  return false;
#endif
}

bool StepGraph::recorded() const { return impl_->loss.defined(); }

bool StepGraph::fits(const std::vector<at::Tensor>& batch) const {
  if (!recorded() || batch.size() != impl_->inputs.size()) return false;
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& a = batch[i];
    const auto& b = impl_->inputs[i];
    if (!a.defined() || a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type() || a.device() != b.device())
      return false;
  }
  return true;
}

std::string StepGraph::shapesOf(const std::vector<at::Tensor>& batch) {
  std::string out;
  for (const auto& t : batch) out += (out.empty() ? "" : ", ") + shapeText(t.sizes());
  return out;
}

std::string StepGraph::shapes() const { return shapesOf(impl_->inputs); }

void StepGraph::reset() {
  const bool had = recorded();
  // Gradients in the graph's pool would keep its memory (and stale values) after it.
  for (size_t i = 0; i < impl_->params.size() && i < impl_->grads.size(); ++i) {
    auto& p = impl_->params[i];
    if (p.grad().defined() && impl_->grads[i].defined() && p.grad().is_same(impl_->grads[i])) p.mutable_grad().reset();
  }
  impl_->params.clear();
  impl_->writes = false;
  impl_->grads.clear();
  impl_->reached.clear();
  impl_->loss.reset();
  impl_->inputs.clear();
#ifdef STRATA_HAS_CUDA
  impl_->graph.reset();  // releases the graph's pool once its last tensor (above) is gone
  if (had) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)had;
#endif
}

void StepGraph::startStep(const std::vector<at::Tensor>& params) {
  if (!recorded()) throw Error("StepGraph::startStep: no graph is recorded");
  if (impl_->writes) {
    for (const auto& p : params) p.mutable_grad().reset();
    return;
  }
  attachGradients(params);
  if (!impl_->reached.empty()) at::_foreach_zero_(impl_->reached);
}

void StepGraph::attachGradients(const std::vector<at::Tensor>& params) {
  if (params.size() != impl_->grads.size())
    throw Error("StepGraph: " + std::to_string(params.size()) + " trained tensors, the graph recorded " +
                std::to_string(impl_->grads.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    if (impl_->grads[i].defined())
      params[i].mutable_grad() = impl_->grads[i];
    else
      params[i].mutable_grad().reset();
  }
}

#ifdef STRATA_HAS_CUDA

void StepGraph::record(const std::vector<at::Tensor>& batch, const LossFn& lossFn,
                       const std::vector<at::Tensor>& params, double lossDivisor) {
  reset();
  if (batch.empty()) throw Error("no micro-batch to record");
  if (!(lossDivisor > 0)) throw Error("the loss divisor must be positive, got " + std::to_string(lossDivisor));
  const c10::Device device = batch.front().device();
  for (const auto& t : batch)
    if (!t.defined() || !t.device().is_cuda() || t.device() != device)
      throw Error("the micro-batch is not on one CUDA device (" + (t.defined() ? t.device().str() : "undefined") +
                  " beside " + device.str() + ")");
  for (const auto& p : params)
    if (p.grad().defined()) throw Error("a trained tensor already has a gradient; the graph would add to it");
  // One micro-batch a step: the backward's own results become the gradients.
  const bool writes = lossDivisor == 1.0;

  const c10::cuda::CUDAGuard onDevice(device);
  // The recorded inputs: regular allocations, outside the graph's pool.
  for (const auto& t : batch) impl_->inputs.push_back(t.clone());
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  std::vector<at::Tensor> grads;
  std::vector<char> reached(params.size(), 0);
  std::vector<unsigned> hooks;
  bool capturing = false;
  try {
    // With accumulation, the gradients the recorded backward adds into: regular
    // allocations too, on the stream the replays run on.
    if (!writes) {
      grads.reserve(params.size());
      for (const auto& p : params) {
        grads.push_back(at::zeros_like(p));  // the layout of p, as the eager backward gives it
        p.mutable_grad() = grads.back();
      }
    }
    // Which trained tensors the backward reaches (host-side hooks, run while it records):
    // the others keep no gradient, as after an eager backward.
    hooks.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i)
      hooks.push_back(params[i].register_hook([&reached, i](const at::Tensor&) { reached[i] = 1; }));
    // Recording starts from a quiet card, and with the eager steps' cached memory
    // returned: the graph's pool does not then sit beside it. cuBLAS keeps a workspace
    // per handle and stream, so the eager steps' (the forward's thread and the
    // backward's, on the default stream) would sit beside the recording's own on the
    // side stream: freed here, they come back at the next eager matmul.
    c10::cuda::device_synchronize();
#if STRATA_TORCH_AT_LEAST(2, 1)
    at::cuda::clearCublasWorkspaces();
#endif
    c10::cuda::CUDACachingAllocator::emptyCache();
    // The capture begins and ends on the side stream (the default stream cannot record).
    const c10::cuda::CUDAStreamGuard onSide(side);
    // Thread-local: another thread's CUDA calls (the app's memory readout) do not
    // spoil the recording; the backward's own thread records onto the same stream.
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    capturing = true;
    at::Tensor loss = lossFn(impl_->inputs);
    if (!loss.defined() || loss.numel() != 1) throw Error("the micro-batch's loss is not one value");
    // As the eager step: the backward of loss / micro-batches, added into the gradients.
    (loss / lossDivisor).backward();
    impl_->loss = loss.detach();
    capturing = false;
    graph->capture_end();
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    if (capturing) try {
        const c10::cuda::CUDAStreamGuard onSide(side);  // a capture ends on the stream it began on
        graph->capture_end();                           // ends the capture (an invalidated one reports its error again)
      } catch (...) {
      }
    (void)cudaGetLastError();  // a capture error is not sticky; clear it for the next launch
    for (size_t i = 0; i < hooks.size(); ++i) params[i].remove_hook(hooks[i]);
    for (const auto& p : params) p.mutable_grad().reset();
    impl_->loss.reset();
    impl_->inputs.clear();
    graph.reset();
    c10::cuda::CUDACachingAllocator::emptyCache();
    throw Error("recording the step as a CUDA graph failed: " + why);
  }
  for (size_t i = 0; i < hooks.size(); ++i) params[i].remove_hook(hooks[i]);
  impl_->graph = std::move(graph);
  if (writes) {
    // What AccumulateGrad kept during the recording: the graph's tensors, written by each replay.
    for (const auto& p : params) grads.push_back(p.grad());
    impl_->params = params;
  }
  impl_->writes = writes;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!reached[i]) grads[i].reset();
    if (grads[i].defined()) impl_->reached.push_back(grads[i]);
  }
  impl_->grads = std::move(grads);
  startStep(params);  // the recording ran nothing: added-into gradients are still zeros, attached
}

at::Tensor StepGraph::replay(const std::vector<at::Tensor>& batch, const std::vector<at::Tensor>& params) {
  if (!fits(batch)) throw Error("the micro-batch does not fit the recorded one (" + shapes() + ")");
  const c10::cuda::CUDAGuard onDevice(impl_->inputs.front().device());
  for (size_t i = 0; i < batch.size(); ++i) impl_->inputs[i].copy_(batch[i], /*non_blocking=*/true);
  impl_->graph->replay();
  if (impl_->writes) attachGradients(params);
  return impl_->loss.clone();
}

#else

void StepGraph::record(const std::vector<at::Tensor>&, const LossFn&, const std::vector<at::Tensor>&, double) {
  throw Error("this build's LibTorch has no CUDA, so it cannot record CUDA graphs");
}

at::Tensor StepGraph::replay(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) {
  throw Error("this build's LibTorch has no CUDA, so it cannot replay CUDA graphs");
}

#endif

}  // namespace strata::train
