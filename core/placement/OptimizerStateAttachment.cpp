#include "placement/OptimizerStateAttachment.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <type_traits>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::placement {

namespace {

// The key differs between LibTorch versions: see compat::optimizerStateKey.
template <class StateMap>
typename StateMap::iterator findState(StateMap& map, const at::Tensor& param) {
  return map.find(compat::optimizerStateKey(param));
}

// `to` is where the tensor lives: a device, pinned host memory included.
at::Tensor movedTo(const at::Tensor& t, const Residence& to) {
  if (!t.defined()) return t;
  if (to.pinned) {
    if (t.is_cpu() && t.is_pinned()) return t;
    at::Tensor out = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    out.copy_(t);  // blocking: the source may be freed right after
    return out;
  }
  return t.device() != to.device ? t.to(to.device) : t;
}

}  // namespace

const AttachmentKind& optimizerStateKind() {
  static const AttachmentKind kind = AttachmentKind::registered("optimizer_state");
  return kind;
}

OptimizerStateAttachment::OptimizerStateAttachment(std::string paramPath,
                                                   std::shared_ptr<torch::optim::Optimizer> optimizer, at::Tensor param,
                                                   bool inHostMemory)
    : paramPath_(std::move(paramPath)),
      optimizer_(std::move(optimizer)),
      param_(std::move(param)),
      inHostMemory_(inHostMemory) {
  if (!optimizer_) throw PlacementError("optimizer state for '" + paramPath_ + "': null optimizer");
}

torch::optim::OptimizerParamState* OptimizerStateAttachment::state() const {
  auto& map = optimizer_->state();
  auto it = findState(map, param_);
  return it == map.end() ? nullptr : it->second.get();
}

std::vector<std::pair<std::string, at::Tensor>> OptimizerStateAttachment::tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto* s = state();
  if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(s)) {
    out = {{"exp_avg", w->exp_avg()}, {"exp_avg_sq", w->exp_avg_sq()}};
    if (w->max_exp_avg_sq().defined()) out.emplace_back("max_exp_avg_sq", w->max_exp_avg_sq());
  } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(s)) {
    out = {{"exp_avg", a->exp_avg()}, {"exp_avg_sq", a->exp_avg_sq()}};
    if (a->max_exp_avg_sq().defined()) out.emplace_back("max_exp_avg_sq", a->max_exp_avg_sq());
  } else if (auto* own = dynamic_cast<SelfDescribingOptimizerState*>(s)) {
    out = own->stateTensors();
  } else if (s != nullptr) {
    throw PlacementError("optimizer state for '" + paramPath_ + "': only Adam, AdamW and Strata's own are supported");
  }
  return out;
}

Residence OptimizerStateAttachment::residence(const c10::Device& blockDevice) const {
  if (!inHostMemory_) return {blockDevice, false};
  return {c10::Device(c10::kCPU), blockDevice.is_cuda()};
}

void OptimizerStateAttachment::moveTo(const c10::Device& device) {
  const Residence to = residence(device);
  auto* s = state();
  if (auto* w = dynamic_cast<torch::optim::AdamWParamState*>(s)) {
    w->exp_avg(movedTo(w->exp_avg(), to));
    w->exp_avg_sq(movedTo(w->exp_avg_sq(), to));
    if (w->max_exp_avg_sq().defined()) w->max_exp_avg_sq(movedTo(w->max_exp_avg_sq(), to));
  } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(s)) {
    a->exp_avg(movedTo(a->exp_avg(), to));
    a->exp_avg_sq(movedTo(a->exp_avg_sq(), to));
    if (a->max_exp_avg_sq().defined()) a->max_exp_avg_sq(movedTo(a->max_exp_avg_sq(), to));
  } else if (auto* own = dynamic_cast<SelfDescribingOptimizerState*>(s)) {
    // Strata's own states (adamw8bit) stay with their parameter: the validator
    // refuses train.offload_optimizer_state with them.
    if (inHostMemory_ && to.device != device)
      throw PlacementError("optimizer state for '" + paramPath_ +
                           "': this optimizer's state cannot be kept in host memory "
                           "(train.offload_optimizer_state works with adamw)");
    own->moveStateTo(device);
  } else if (s != nullptr) {
    throw PlacementError("optimizer state for '" + paramPath_ + "': only Adam, AdamW and Strata's own are supported");
  }
}

std::vector<std::shared_ptr<Attachment>> OptimizerStateAttachment::forParameters(
    const std::shared_ptr<torch::optim::Optimizer>& optimizer,
    const std::vector<std::pair<std::string, at::Tensor>>& namedParams, bool inHostMemory) {
  std::vector<std::shared_ptr<Attachment>> out;
  for (const auto& np : namedParams) {
    out.push_back(std::make_shared<OptimizerStateAttachment>(np.first, optimizer, np.second, inHostMemory));
  }
  return out;
}

}  // namespace strata::placement
