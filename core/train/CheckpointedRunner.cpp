#include "train/CheckpointedRunner.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/Error.h"

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
  std::vector<bool> defined;       // which BlockIO fields were given
  std::vector<bool> requiresGrad;  // per given field
  std::vector<bool> outDefined;    // which fields the block returned
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

}  // namespace

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CallState> state, at::Tensor anchor,
                               at::TensorList inputs) {
    std::vector<at::Tensor> given(inputs.begin(), inputs.end());
    state->cpuRngState = rngState(c10::Device(c10::kCPU));
    for (const auto& d : cudaDevicesOf(*state->block, given)) state->cudaRngStates.emplace_back(d, rngState(d));
    std::vector<at::Tensor> fields;
    size_t k = 0;
    for (bool def : state->defined) fields.push_back(def ? given[k++] : at::Tensor());
    // Grad mode is off here (Function::apply), so the block keeps no activations.
    const auto out = state->inner->run(state->blockIndex, *state->block, nn::BlockIO::fromFields(fields));
    ctx->save_for_backward(given);
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
    const auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      auto d = saved[i].detach();
      if (state->requiresGrad[i]) d.requires_grad_(true);
      inputs.push_back(d);
    }
    std::vector<at::Tensor> fields;
    size_t k = 0;
    for (bool def : state->defined) fields.push_back(def ? inputs[k++] : at::Tensor());

    // Recompute with the RNG states of the forward, then put the current ones back.
    const auto cpuNow = rngState(c10::Device(c10::kCPU));
    std::vector<std::pair<c10::Device, at::Tensor>> cudaNow;
    for (const auto& [d, s] : state->cudaRngStates) cudaNow.emplace_back(d, rngState(d));
    setRngState(c10::Device(c10::kCPU), state->cpuRngState);
    for (const auto& [d, s] : state->cudaRngStates) setRngState(d, s);
    nn::BlockIO out;
    {
      at::AutoGradMode enable(true);
      out = state->inner->run(state->blockIndex, *state->block, nn::BlockIO::fromFields(fields));
    }
    setRngState(c10::Device(c10::kCPU), cpuNow);
    for (const auto& [d, s] : cudaNow) setRngState(d, s);
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

CheckpointedRunner::CheckpointedRunner(nn::BlockRunner& inner)
    : inner_(inner), anchor_(at::zeros({}, at::kFloat).requires_grad_(true)) {}

nn::BlockIO CheckpointedRunner::run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) {
  if (!at::GradMode::is_enabled()) return inner_.run(blockIndex, block, in);
  auto state = c10::make_intrusive<CallState>();
  state->runner = this;
  state->inner = &inner_;
  state->block = &block;
  state->blockIndex = blockIndex;
  std::vector<at::Tensor> given;
  for (const auto& t : in.fields()) {
    state->defined.push_back(t.defined());
    if (t.defined()) {
      given.push_back(t);
      state->requiresGrad.push_back(t.requires_grad());
    }
  }
  const auto outputs = CheckpointFunction::apply(state, anchor_, at::TensorList(given));
  // outputs hold the defined fields of the block's result, in field order.
  std::vector<at::Tensor> fields;
  size_t k = 0;
  for (bool def : state->outDefined) fields.push_back(def ? outputs[k++] : at::Tensor());
  return nn::BlockIO::fromFields(fields);
}

}  // namespace strata::train
