#include "dist/AveragingReducer.h"

#include <vector>

namespace strata::dist {

void AveragingReducer::reduce(train::StepGradients& step) {
  const double world = static_cast<double>(collective_->worldSize());
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> tensors;
  tensors.reserve(step.params.size() + 1);
  for (const auto& p : step.params) {
    // A parameter without a gradient on this rank takes part as zeros, so every
    // rank packs the same buffers.
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    tensors.push_back(p.grad());
  }
  // The losses in one tensor of their own; each micro-batch's loss is replaced by its average.
  at::Tensor losses;
  if (!step.losses.empty()) {
    std::vector<at::Tensor> flat;
    // Kept on their device: reading them on the host here would wait for the step's
    // work, which the trainer's queued optimizer step avoids.
    const c10::Device device = step.losses.front().device();
    for (const auto& l : step.losses) flat.push_back(l.detach().to(device, at::kDouble).reshape({1}));
    losses = at::cat(flat);
    tensors.push_back(losses);
  }
  collective_->allReduceSum(tensors);
  for (size_t i = 0; i < step.params.size(); ++i) tensors[i].div_(world);
  if (losses.defined()) {
    losses.div_(world);
    for (size_t m = 0; m < step.losses.size(); ++m) {
      const at::Tensor& was = step.losses[m];
      step.losses[m] = losses[static_cast<int64_t>(m)].to(was.device(), was.scalar_type()).reshape(was.sizes());
    }
  }
}

}  // namespace strata::dist
