#include "dist/AveragingReducer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace strata::dist {

void AveragingReducer::reduce(train::StepGradients& step) {
  const double world = static_cast<double>(collective_->worldSize());
  at::NoGradGuard noGrad;
  // The gradients packed into one flat buffer per device and dtype (a split model
  // has its LoRA on several cards), in the parameters' order: the same buffers on
  // every rank. After the sum each gradient becomes a view of its buffer, so the
  // reduce costs one concatenation, the collective and one division per buffer
  // instead of a copy and a division per parameter (FLUX.1 has ~800).
  std::vector<std::pair<std::pair<std::string, int>, std::vector<size_t>>> groups;
  for (size_t i = 0; i < step.params.size(); ++i) {
    const at::Tensor& p = step.params[i];
    // A parameter without a gradient on this rank takes part as zeros, so every
    // rank packs the same buffers.
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    const std::pair<std::string, int> key{p.device().str(), static_cast<int>(p.scalar_type())};
    auto at = std::find_if(groups.begin(), groups.end(), [&key](const auto& g) { return g.first == key; });
    if (at == groups.end()) at = groups.insert(groups.end(), {key, {}});
    at->second.push_back(i);
  }
  std::vector<at::Tensor> buffers;
  for (const auto& group : groups) {
    std::vector<at::Tensor> flat;
    for (size_t i : group.second) flat.push_back(step.params[i].grad().reshape({-1}));
    buffers.push_back(at::cat(flat));
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
    buffers.push_back(losses);
  }
  collective_->allReduceSum(buffers);
  for (size_t g = 0; g < groups.size(); ++g) {
    at::Tensor& buffer = buffers[g];
    buffer.div_(world);
    int64_t offset = 0;
    for (size_t i : groups[g].second) {
      const at::Tensor& p = step.params[i];
      const int64_t n = p.numel();
      p.mutable_grad() = buffer.narrow(0, offset, n).view(p.sizes());
      offset += n;
    }
  }
  if (losses.defined()) {
    losses.div_(world);
    for (size_t m = 0; m < step.losses.size(); ++m) {
      const at::Tensor& was = step.losses[m];
      step.losses[m] = losses[static_cast<int64_t>(m)].to(was.device(), was.scalar_type()).reshape(was.sizes());
    }
  }
}

}  // namespace strata::dist
