#include "train/FusedAdamW.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::train {

bool fusedAdamWAvailable(const c10::Device& device) { return compat::kHasFusedAdamW && device.is_cuda(); }

namespace {

// The tensors of one kernel call: same device, same dtype, same step count.
struct Bucket {
  std::vector<at::Tensor> params, grads, avgs, sqs;
};

using BucketKey = std::tuple<std::string, int, int64_t>;  // device, dtype, step

bool fusableType(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

}  // namespace

bool FusedAdamW::canSkipOnDevice() const {
  if (!allowFused_) return false;
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params())
      if (!fusedAdamWAvailable(p.device()) || !fusableType(p.scalar_type())) return false;
  }
  return true;
}

void FusedAdamW::skipNextStepIfNotFinite(at::Tensor value) {
  if (!canSkipOnDevice()) throw Error("FusedAdamW: a step can be skipped on the device only on the fused path");
  skipIfNotFinite_ = std::move(value);
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  // Taken for this step only, whichever path it takes.
  const at::Tensor skipIf = std::exchange(skipIfNotFinite_, at::Tensor());
  for (const auto& group : param_groups_)
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) {
      lastPath_ = "per-tensor";
      return torch::optim::AdamW::step(std::move(closure));
    }
  at::NoGradGuard noGrad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  std::string path;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::map<BucketKey, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      if (grad.is_sparse()) throw Error("FusedAdamW: sparse gradients are not supported");
      auto& slot = state_[compat::optimizerStateKey(p)];
      if (!slot) {
        // As AdamW starts a parameter: step 0, zero moments.
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      auto& b = buckets[{p.device().str(), static_cast<int>(p.scalar_type()), s.step()}];
      b.params.push_back(p);
      b.grads.push_back(grad);
      b.avgs.push_back(s.exp_avg());
      b.sqs.push_back(s.exp_avg_sq());
    }
    for (auto& [key, b] : buckets) {
      const int64_t step = std::get<2>(key);
      const auto device = b.params.front().device();
      const auto dtype = b.params.front().scalar_type();
      if (allowFused_ && fusableType(dtype) && fusedAdamWAvailable(device)) {
        // The kernel reads one float step per tensor; all of this bucket share one.
        const auto stepTensor = at::full({}, static_cast<double>(step), at::TensorOptions(device).dtype(at::kFloat));
        const std::vector<at::Tensor> steps(b.params.size(), stepTensor);
        at::Tensor foundInf;  // 1 where the step is to be skipped
        if (skipIf.defined())
          foundInf = at::logical_not(at::isfinite(skipIf)).to(device, at::kFloat, /*non_blocking=*/true);
        compat::fusedAdamW(b.params, b.grads, b.avgs, b.sqs, steps, lr, beta1, beta2, wd, eps, foundInf);
        path = "fused";
        continue;
      }
      // AdamW's own arithmetic, op for op, over the whole list.
      if (wd != 0.0) at::_foreach_mul_(b.params, 1.0 - lr * wd);
      const double biasCorrection1 = 1.0 - std::pow(beta1, static_cast<double>(step));
      const double biasCorrection2 = 1.0 - std::pow(beta2, static_cast<double>(step));
      at::_foreach_mul_(b.avgs, beta1);
      at::_foreach_add_(b.avgs, b.grads, 1.0 - beta1);
      at::_foreach_mul_(b.sqs, beta2);
      at::_foreach_addcmul_(b.sqs, b.grads, b.grads, 1.0 - beta2);
      auto denom = at::_foreach_sqrt(b.sqs);
      at::_foreach_div_(denom, std::sqrt(biasCorrection2));
      at::_foreach_add_(denom, eps);
      at::_foreach_addcdiv_(b.params, b.avgs, denom, -lr / biasCorrection1);
      if (path.empty()) path = "foreach";
    }
  }
  lastPath_ = path;
  return loss;
}

}  // namespace strata::train
