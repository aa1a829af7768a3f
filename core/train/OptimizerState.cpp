#include "train/OptimizerState.h"

#include <type_traits>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::train {

namespace {

// The state map's key for a parameter (differs between LibTorch versions).
template <class StateMap>
auto stateKey(const at::Tensor& param) {
  return compat::optimizerStateKey(param);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> saveAdamWState(torch::optim::AdamW& optimizer,
                                                               const NamedParams& params) {
  using Map = std::decay_t<decltype(optimizer.state())>;
  auto& map = optimizer.state();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : params) {
    auto it = map.find(stateKey<Map>(p));
    auto* s = it == map.end() ? nullptr : dynamic_cast<torch::optim::AdamWParamState*>(it->second.get());
    if (!s) {
      // No step has touched it yet (a stop before step 1, or fp16 steps all
      // skipped). AdamW starts such a parameter from zero moments at step 0, so
      // writing exactly that keeps the checkpoint whole and resumable.
      out.emplace_back(name + ".exp_avg", at::zeros_like(p));
      out.emplace_back(name + ".exp_avg_sq", at::zeros_like(p));
      out.emplace_back(name + ".step", at::zeros({1}, at::kLong));
      continue;
    }
    out.emplace_back(name + ".exp_avg", s->exp_avg());
    out.emplace_back(name + ".exp_avg_sq", s->exp_avg_sq());
    out.emplace_back(name + ".step", at::full({1}, s->step(), at::kLong));
  }
  return out;
}

void loadAdamWState(torch::optim::AdamW& optimizer, const NamedParams& params,
                    const std::map<std::string, at::Tensor>& tensors) {
  using Map = std::decay_t<decltype(optimizer.state())>;
  std::string problems;
  struct Pending {
    at::Tensor param, avg, avgSq;
    int64_t step;
  };
  std::vector<Pending> pending;
  for (const auto& [name, p] : params) {
    auto a = tensors.find(name + ".exp_avg");
    auto b = tensors.find(name + ".exp_avg_sq");
    auto s = tensors.find(name + ".step");
    if (a == tensors.end() && b == tensors.end() && s == tensors.end()) {
      problems += "\n  missing: " + name;
      continue;
    }
    if (a == tensors.end() || b == tensors.end() || s == tensors.end()) {
      problems += "\n  incomplete: " + name;
      continue;
    }
    if (!a->second.sizes().equals(p.sizes()) || !b->second.sizes().equals(p.sizes())) {
      problems += "\n  mis-shaped: " + name;
      continue;
    }
    pending.push_back({p, a->second, b->second, s->second.to(at::kLong).reshape({-1})[0].item<int64_t>()});
  }
  if (!problems.empty()) throw LoadError("optimizer state does not match the LoRA network:" + problems);
  auto& map = optimizer.state();
  for (const auto& e : pending) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(e.step);
    st->exp_avg(e.avg.to(e.param.device(), e.param.scalar_type()).clone());
    st->exp_avg_sq(e.avgSq.to(e.param.device(), e.param.scalar_type()).clone());
    map[stateKey<Map>(e.param)] = std::move(st);
  }
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace strata::train
