#include "train/OptimizerState.h"

#include <type_traits>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "train/AdamW8bit.h"
#include "train/FusedAdamW.h"

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
  // Moments in host memory may still be on their way back from the card.
  if (auto* fused = dynamic_cast<FusedAdamW*>(&optimizer)) fused->finishCopiesBack();
  using Map = std::decay_t<decltype(optimizer.state())>;
  auto& map = optimizer.state();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : params) {
    auto it = map.find(stateKey<Map>(p));
    if (auto* q = it == map.end() ? nullptr : dynamic_cast<AdamW8bitParamState*>(it->second.get());
        q && q->avgCodes.defined()) {
      for (auto& [key, t] : q->stateTensors()) out.emplace_back(name + "." + key, t);
      out.emplace_back(name + ".step", at::full({1}, q->step, at::kLong));
      continue;
    }
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

namespace {

// One parameter's moments as a checkpoint holds them: float32 (plain AdamW) or
// 8-bit blocks (adamw8bit). Either loads into either optimizer.
struct SavedMoments {
  at::Tensor param;
  int64_t step = 0;
  at::Tensor avg, avgSq;                        // float, the parameter's shape
  at::Tensor avgCodes, avgMax, sqCodes, sqMax;  // or 8-bit
  bool quantized() const { return avgCodes.defined(); }
};

const at::Tensor* find(const std::map<std::string, at::Tensor>& tensors, const std::string& key) {
  auto it = tensors.find(key);
  return it == tensors.end() ? nullptr : &it->second;
}

// The problem with `name`'s state in `tensors`, or "" with `out` filled.
std::string readMoments(const std::map<std::string, at::Tensor>& tensors, const std::string& name, const at::Tensor& p,
                        SavedMoments& out) {
  const auto* a = find(tensors, name + ".exp_avg");
  const auto* b = find(tensors, name + ".exp_avg_sq");
  const auto* qa = find(tensors, name + ".exp_avg.blockwise8");
  const auto* qaMax = find(tensors, name + ".exp_avg.blockwise8_absmax");
  const auto* qb = find(tensors, name + ".exp_avg_sq.blockwise8");
  const auto* qbMax = find(tensors, name + ".exp_avg_sq.blockwise8_absmax");
  const auto* s = find(tensors, name + ".step");
  if (!a && !b && !qa && !qaMax && !qb && !qbMax && !s) return "missing: " + name;
  out.param = p;
  if (s) out.step = s->to(at::kLong).reshape({-1})[0].item<int64_t>();
  if (a || b) {
    if (!a || !b || !s) return "incomplete: " + name;
    if (!a->sizes().equals(p.sizes()) || !b->sizes().equals(p.sizes())) return "mis-shaped: " + name;
    out.avg = *a;
    out.avgSq = *b;
    return "";
  }
  if (!qa || !qaMax || !qb || !qbMax || !s) return "incomplete: " + name;
  const int64_t len = blockwise8Length(p.numel());
  for (const auto* codes : {qa, qb})
    if (codes->scalar_type() != at::kByte || codes->numel() != len) return "mis-shaped 8-bit moments: " + name;
  for (const auto* maxima : {qaMax, qbMax})
    if (maxima->scalar_type() != at::kFloat || maxima->numel() != len / kBlock8)
      return "mis-shaped 8-bit block maxima: " + name;
  out.avgCodes = *qa;
  out.avgMax = *qaMax;
  out.sqCodes = *qb;
  out.sqMax = *qbMax;
  return "";
}

}  // namespace

void loadAdamWState(torch::optim::AdamW& optimizer, const NamedParams& params,
                    const std::map<std::string, at::Tensor>& tensors, bool momentsInHostMemory) {
  // No copy back of the last step may land in moments this replaces.
  if (auto* fused = dynamic_cast<FusedAdamW*>(&optimizer)) fused->finishCopiesBack();
  using Map = std::decay_t<decltype(optimizer.state())>;
  std::string problems;
  std::vector<SavedMoments> pending;
  for (const auto& [name, p] : params) {
    SavedMoments m;
    const auto problem = readMoments(tensors, name, p, m);
    if (problem.empty())
      pending.push_back(std::move(m));
    else
      problems += "\n  " + problem;
  }
  if (!problems.empty()) throw LoadError("optimizer state does not match the LoRA network:" + problems);
  const bool eightBit = dynamic_cast<AdamW8bit*>(&optimizer) != nullptr;
  auto& map = optimizer.state();
  for (const auto& e : pending) {
    const auto device = e.param.device();
    if (eightBit) {
      auto st = std::make_unique<AdamW8bitParamState>();
      st->step = e.step;
      if (e.quantized()) {
        st->avgCodes = e.avgCodes.to(device).clone();
        st->avgAbsmax = e.avgMax.to(device).clone();
        st->sqCodes = e.sqCodes.to(device).clone();
        st->sqAbsmax = e.sqMax.to(device).clone();
      } else if (e.step > 0) {
        st->setMoments(e.avg.to(device), e.avgSq.to(device));  // from a plain AdamW checkpoint
      }
      map[stateKey<Map>(e.param)] = std::move(st);
      continue;
    }
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(e.step);
    if (e.quantized()) {  // an adamw8bit checkpoint resumed with plain AdamW
      AdamW8bitParamState q;
      q.avgCodes = e.avgCodes.to(device);
      q.avgAbsmax = e.avgMax.to(device);
      q.sqCodes = e.sqCodes.to(device);
      q.sqAbsmax = e.sqMax.to(device);
      st->exp_avg(q.expAvg(e.param).to(e.param.scalar_type()));
      st->exp_avg_sq(q.expAvgSq(e.param).to(e.param.scalar_type()));
    } else if (momentsInHostMemory && device.is_cuda()) {
      // pin_memory() copies: the state owns its tensors, as clone() gives below.
      st->exp_avg(e.avg.to(at::kCPU, e.param.scalar_type()).contiguous().pin_memory());
      st->exp_avg_sq(e.avgSq.to(at::kCPU, e.param.scalar_type()).contiguous().pin_memory());
    } else {
      st->exp_avg(e.avg.to(device, e.param.scalar_type()).clone());
      st->exp_avg_sq(e.avgSq.to(device, e.param.scalar_type()).clone());
    }
    map[stateKey<Map>(e.param)] = std::move(st);
  }
}

void setLearningRate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace strata::train
