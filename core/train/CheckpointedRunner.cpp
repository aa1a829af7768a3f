#include "train/CheckpointedRunner.h"

#include <algorithm>
#include <utility>

#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/Error.h"
#include "common/ShapeText.h"

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace strata::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// What the backward needs besides the saved inputs. Raw pointers: the runner
// and the block outlive the graph (documented on CheckpointedRunner).
struct CallState : torch::CustomClassHolder {
  CheckpointedRunner* runner = nullptr;
  nn::BlockRunner* inner = nullptr;
  nn::Block* block = nullptr;
  size_t blockIndex = 0;
  std::vector<bool> defined;        // which BlockIO fields were given
  std::vector<bool> requiresGrad;   // per given field
  std::vector<bool> outDefined;     // which fields the block returned
  std::vector<bool> offload;        // per given field: kept in host memory (train.offload_checkpoints)
  std::vector<at::Tensor> host;     // per given field: its pinned host copy, or undefined
  std::vector<c10::Device> hostOf;  // per given field: the device it came from
#ifdef STRATA_HAS_CUDA
  std::vector<std::shared_ptr<at::cuda::CUDAEvent>> copied;  // per given field: its host copy is done
  // Per given field: its copy back, started by the backward of the block after it, and that
  // copy's event (prefetch).
  std::vector<at::Tensor> prefetched;
  std::vector<std::shared_ptr<at::cuda::CUDAEvent>> prefetchDone;
#endif
  // The checkpointed block that ran just before this one in the same forward pass: its
  // recompute comes right after this one's, so this backward starts its copy back.
  c10::intrusive_ptr<c10::intrusive_ptr_target> previous;
  at::Tensor cpuRngState;
  std::vector<std::pair<c10::Device, at::Tensor>> cudaRngStates;
};

std::vector<c10::Device> cudaDevicesOf(const nn::Block& block, const std::vector<at::Tensor>& inputs) {
  std::vector<c10::Device> out;
  auto add = [&](const c10::Device& d) {
    if (d.is_cuda() && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  for (const auto& t : inputs) add(t.device());
  for (const auto& p : block.parameters()) add(p.device());
  return out;
}

at::Tensor rngState(const c10::Device& d) {
  auto g = at::globalContext().defaultGenerator(d);
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void setRngState(const c10::Device& d, const at::Tensor& state) {
  auto g = at::globalContext().defaultGenerator(d);
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

// The block input `t` copied into `slot` (pinned host memory the runner keeps), on a side
// stream once the work queued so far on the current stream (which produced t) is done: the
// copy runs beside the next blocks instead of between them. t stays alive, in the runner's
// pending list, until the current stream has waited for the copy (CheckpointedRunner::
// releaseCopied), so its card memory is reused only in stream order: no record_stream, whose
// frees a CUDA graph's recording defers to the recording's end. state.copied gets the event
// "copied"; the returned function makes t's current stream wait for it.
std::function<void()> copyToHost(const at::Tensor& t, const at::Tensor& slot, CallState& state) {
#ifdef STRATA_HAS_CUDA
  const c10::cuda::CUDAGuard guard(t.device());
  const auto compute = c10::cuda::getCurrentCUDAStream(t.get_device());
  const auto side = c10::cuda::getStreamFromPool(false, t.get_device());
  at::cuda::CUDAEvent ready;
  ready.record(compute);
  ready.block(side);
  {
    const c10::cuda::CUDAStreamGuard onSide(side);
    slot.copy_(t, /*non_blocking=*/true);
  }
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  done->record(side);
  state.copied.push_back(done);
  return [done, device = t.device()] {
    const c10::cuda::CUDAGuard onDevice(device);
    done->block(c10::cuda::getCurrentCUDAStream(device.index()));
  };
#else
  (void)state;
  slot.copy_(t, /*non_blocking=*/true);
  return nullptr;
#endif
}

// The device copy of an offloaded field, queued on the current stream after its
// host copy is complete.
at::Tensor copyBack(const CallState& state, size_t i) {
#ifdef STRATA_HAS_CUDA
  if (state.hostOf[i].is_cuda() && i < state.copied.size() && state.copied[i]) {
    const c10::cuda::CUDAGuard guard(state.hostOf[i]);
    state.copied[i]->block(c10::cuda::getCurrentCUDAStream(state.hostOf[i].index()));
  }
#endif
  return state.host[i].to(state.hostOf[i], /*non_blocking=*/true);
}

#ifdef STRATA_HAS_CUDA
// Starts the copies back of `state`'s offloaded inputs on a side stream, so that they
// run beside the current block's recompute and backward. Each lands in memory taken on
// the compute stream, written by the side stream only once the compute stream has
// reached this point (everything that used that memory before is done), and read by
// the compute stream only after waiting for the copy (takePrefetched): no record_stream.
// Only inputs on `here` (the calling backward's card), whose compute stream this thread
// knows; a split's block on another card copies back when it is recomputed.
void prefetch(CallState& state, const c10::Device& here) {
  state.prefetched.resize(state.host.size());
  state.prefetchDone.resize(state.host.size());
  for (size_t i = 0; i < state.host.size(); ++i) {
    if (!state.host[i].defined() || state.hostOf[i] != here || state.prefetched[i].defined()) continue;
    const c10::cuda::CUDAGuard guard(state.hostOf[i]);
    const auto compute = c10::cuda::getCurrentCUDAStream(state.hostOf[i].index());
    const auto side = c10::cuda::getStreamFromPool(false, state.hostOf[i].index());
    auto onCard = at::empty(state.host[i].sizes(), state.host[i].options().device(state.hostOf[i]));
    at::cuda::CUDAEvent taken;
    taken.record(compute);
    taken.block(side);
    if (i < state.copied.size() && state.copied[i]) state.copied[i]->block(side);
    {
      const c10::cuda::CUDAStreamGuard onSide(side);
      onCard.copy_(state.host[i], /*non_blocking=*/true);
    }
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(side);
    state.prefetched[i] = std::move(onCard);
    state.prefetchDone[i] = std::move(done);
  }
}

// The prefetched copy of field i, once the compute stream has waited for it; undefined
// where none was started.
at::Tensor takePrefetched(CallState& state, size_t i) {
  if (i >= state.prefetched.size() || !state.prefetched[i].defined()) return at::Tensor();
  const c10::cuda::CUDAGuard guard(state.hostOf[i]);
  state.prefetchDone[i]->block(c10::cuda::getCurrentCUDAStream(state.hostOf[i].index()));
  state.prefetchDone[i].reset();
  return std::exchange(state.prefetched[i], at::Tensor());
}
#endif

}  // namespace

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CallState> state, at::Tensor anchor,
                               at::TensorList inputs) {
    std::vector<at::Tensor> given(inputs.begin(), inputs.end());
    if (state->runner->blocksDrawRandom_) {
      state->cpuRngState = rngState(c10::Device(c10::kCPU));
      for (const auto& d : cudaDevicesOf(*state->block, given)) state->cudaRngStates.emplace_back(d, rngState(d));
    }
    std::vector<at::Tensor> fields;
    size_t k = 0;
    for (bool def : state->defined) fields.push_back(def ? given[k++] : at::Tensor());
    // Grad mode is off here (Function::apply), so the block keeps no activations.
    const auto out = state->inner->run(state->blockIndex, *state->block, nn::BlockIO::fromFields(fields));
    // Offloaded inputs: a pinned copy on a side stream (copyToHost).
    std::vector<at::Tensor> toSave;
    for (size_t i = 0; i < given.size(); ++i) {
      state->hostOf.push_back(given[i].device());
      if (state->offload[i] && given[i].is_cuda()) {
        const auto& slot = state->runner->hostSlot(state->blockIndex, i, given[i]);
        state->runner->pending_.push_back({given[i], copyToHost(given[i], slot, *state), state->runner->forwards_});
        state->host.push_back(slot);
        toSave.push_back(at::Tensor());
        ++state->runner->offloads_;
      } else {
        state->host.push_back(at::Tensor());
#ifdef STRATA_HAS_CUDA
        state->copied.emplace_back();
#endif
        toSave.push_back(given[i]);
      }
    }
    // The inputs copied two blocks ago have had those blocks' time to reach host memory.
    state->runner->releaseCopied(/*keepBlocks=*/2);
    ++state->runner->forwards_;
    ctx->save_for_backward(toSave);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    variable_list outputs;
    state->outDefined.clear();
    for (const auto& t : out.fields()) {
      state->outDefined.push_back(t.defined());
      if (t.defined()) outputs.push_back(t);
    }
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    auto state = c10::static_intrusive_pointer_cast<CallState>(ctx->saved_data["state"].toCapsule());
    // The forward's last copies: waited for here, where a recording joins its side streams.
    state->runner->releaseCopied(/*keepBlocks=*/0);
    state->runner->lastForward_.reset();  // the next forward pass links its blocks anew
    const auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor d;
      if (state->host[i].defined()) {
#ifdef STRATA_HAS_CUDA
        d = takePrefetched(*state, i);
#endif
        if (!d.defined()) d = copyBack(*state, i);
      } else {
        d = saved[i].detach();
      }
      if (state->requiresGrad[i]) d.requires_grad_(true);
      inputs.push_back(d);
    }
#ifdef STRATA_HAS_CUDA
    // The block recomputed next: its inputs come back while this one is recomputed.
    const auto here =
        std::find_if(state->hostOf.begin(), state->hostOf.end(), [](const c10::Device& d) { return d.is_cuda(); });
    if (state->previous && here != state->hostOf.end())
      prefetch(*static_cast<CallState*>(state->previous.get()), *here);
#endif
    state->previous.reset();
    std::vector<at::Tensor> fields;
    size_t k = 0;
    for (bool def : state->defined) fields.push_back(def ? inputs[k++] : at::Tensor());

    // Recompute with the RNG states of the forward (where the forward saved them), then
    // put the current ones back.
    const bool restore = state->cpuRngState.defined();
    at::Tensor cpuNow;
    std::vector<std::pair<c10::Device, at::Tensor>> cudaNow;
    if (restore) {
      cpuNow = rngState(c10::Device(c10::kCPU));
      for (const auto& [d, s] : state->cudaRngStates) cudaNow.emplace_back(d, rngState(d));
      setRngState(c10::Device(c10::kCPU), state->cpuRngState);
      for (const auto& [d, s] : state->cudaRngStates) setRngState(d, s);
    }
    nn::BlockIO out;
    {
      at::AutoGradMode enable(true);
      out = state->inner->run(state->blockIndex, *state->block, nn::BlockIO::fromFields(fields));
    }
    if (restore) {
      setRngState(c10::Device(c10::kCPU), cpuNow);
      for (const auto& [d, s] : cudaNow) setRngState(d, s);
    }
    ++state->runner->recomputes_;

    std::vector<at::Tensor> outs, grads;
    size_t g = 0;
    for (const auto& t : out.fields()) {
      if (!t.defined()) continue;
      const auto& grad = gradOutputs[g++];
      if (t.requires_grad() && grad.defined()) {
        outs.push_back(t);
        grads.push_back(grad);
      }
    }
    if (!outs.empty()) torch::autograd::backward(outs, grads);

    variable_list result;
    result.emplace_back();  // state (not a tensor)
    result.emplace_back();  // anchor: nothing flows into it
    for (const auto& in : inputs) result.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    return result;
  }
};

CheckpointedRunner::CheckpointedRunner(nn::BlockRunner& inner, bool offloadInputs, bool blocksDrawRandom)
    : inner_(inner),
      anchor_(at::zeros({}, at::kFloat).requires_grad_(true)),
      offloadInputs_(offloadInputs),
      blocksDrawRandom_(blocksDrawRandom) {}

nn::BlockIO CheckpointedRunner::run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) {
  if (!at::GradMode::is_enabled()) return inner_.run(blockIndex, block, in);
  auto state = c10::make_intrusive<CallState>();
  state->runner = this;
  state->inner = &inner_;
  state->block = &block;
  state->blockIndex = blockIndex;
  if (offloadInputs_) {
    state->previous = std::exchange(lastForward_, state);
  }
  std::vector<at::Tensor> given;
  const auto inFields = in.fields();
  for (size_t f = 0; f < inFields.size(); ++f) {
    const auto& t = inFields[f];
    state->defined.push_back(t.defined());
    if (t.defined()) {
      given.push_back(t);
      state->requiresGrad.push_back(t.requires_grad());
      // Only the per-block tokens (img, txt: fields 0 and 1); temb and the rotary
      // tables are one tensor shared by every block.
      state->offload.push_back(offloadInputs_ && f < 2);
    }
  }
  const auto outputs = CheckpointFunction::apply(state, anchor_, at::TensorList(given));
  // outputs hold the defined fields of the block's result, in field order.
  std::vector<at::Tensor> fields;
  size_t k = 0;
  for (bool def : state->outDefined) fields.push_back(def ? outputs[k++] : at::Tensor());
  return nn::BlockIO::fromFields(fields);
}

const at::Tensor& CheckpointedRunner::hostSlot(size_t blockIndex, size_t field, const at::Tensor& like) {
  auto& slot = hostSlots_[{blockIndex, field}];
  if (slot.defined() && slot.sizes() == like.sizes() && slot.scalar_type() == like.scalar_type()) return slot;
#ifdef STRATA_HAS_CUDA
  // A recording cannot take pinned memory: its step must find every slot made by an eager step.
  if (like.is_cuda() && c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None)
    throw Error("train.offload_checkpoints: block " + std::to_string(blockIndex) + "'s input " +
                shapeText(like.sizes()) +
                " has no host copy of its shape yet, and a step being recorded as a CUDA graph cannot allocate "
                "one (pinned host memory); an eager step of this shape makes it");
#endif
  slot = at::empty(like.sizes(), like.options().device(c10::kCPU).pinned_memory(true));
  return slot;
}

void CheckpointedRunner::releaseCopied(int64_t keepBlocks) {
  while (!pending_.empty() && pending_.front().forward + keepBlocks <= forwards_) {
    if (pending_.front().waitForCopy) pending_.front().waitForCopy();
    pending_.pop_front();
  }
}

}  // namespace strata::train
