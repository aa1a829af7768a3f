#include "lora/LoraAdapter.h"

#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <cmath>
#include <sstream>

#include "common/Error.h"

namespace strata::lora {

void LoraMultiplier::set(double value) {
  scalar_ = value;
  perSample_ = at::Tensor();
  copies_.clear();
}

void LoraMultiplier::set(const at::Tensor& perSample) {
  if (!perSample.defined() || perSample.dim() != 1)
    throw Error("LoRA multiplier: a per-sample multiplier must be a 1-d tensor [B]");
  scalar_ = 1.0;
  perSample_ = perSample.detach();
  copies_.clear();
}

at::Tensor LoraMultiplier::apply(const at::Tensor& delta) const {
  at::Tensor out = scalar_ == 1.0 ? delta : delta * scalar_;
  if (!perSample_.defined()) return out;
  if (delta.dim() < 1 || perSample_.size(0) != delta.size(0)) {
    std::ostringstream os;
    os << "LoRA multiplier: per-sample multiplier of shape " << perSample_.sizes()
       << " does not match the batch of an adapter output of shape " << delta.sizes();
    throw Error(os.str());
  }
  // Moved here, at the point of use, to the output's device (seed bug 3).
  at::Tensor m;
  for (const auto& c : copies_)
    if (c.device() == delta.device() && c.scalar_type() == delta.scalar_type()) m = c;
  if (!m.defined()) {
    m = perSample_.to(delta.device(), delta.scalar_type());
    copies_.push_back(m);
  }
  std::vector<int64_t> shape(static_cast<size_t>(delta.dim()), 1);
  shape[0] = delta.size(0);
  return out * m.reshape(shape);  // [B, 1, ...]
}

LoraAdapter::LoraAdapter(std::string hostPath, std::shared_ptr<nn::LinearImpl> host, int64_t rank, double alpha,
                         double dropout, std::shared_ptr<const LoraMultiplier> multiplier)
    : hostPath_(std::move(hostPath)),
      host_(std::move(host)),
      rank_(rank),
      alpha_(alpha),
      dropout_(dropout),
      multiplier_(std::move(multiplier)) {
  if (!host_) throw Error("LoRA adapter for '" + hostPath_ + "': no host Linear");
  if (rank_ <= 0) throw Error("LoRA adapter for '" + hostPath_ + "': rank must be positive");
  if (!multiplier_) multiplier_ = std::make_shared<LoraMultiplier>();
  // Drawn by the CPU generator, so the same seed gives the same adapters however
  // the model is placed; then put on the host's device, never on a default one (seed bug 1).
  at::Tensor downInit = at::empty({rank_, host_->inFeatures()}, at::kFloat);
  {
    torch::NoGradGuard noGrad;
    torch::nn::init::kaiming_uniform_(downInit, std::sqrt(5.0));
  }
  const auto device = host_->weight.device();
  down = register_parameter("lora_A", downInit.to(device));
  up = register_parameter("lora_B",
                          at::zeros({host_->outFeatures(), rank_}, at::TensorOptions(at::kFloat).device(device)));
}

at::Tensor LoraAdapter::delta(const at::Tensor& input, const at::Tensor& /*baseOutput*/) {
  const at::Tensor x = (dropout_ > 0.0 && is_training()) ? at::dropout(input, dropout_, true) : input;
  // Float32 master weights, computed in the activation dtype; alpha/r scales the
  // small up weight [out, r] rather than the [..., out] output.
  const auto dtype = input.scalar_type();
  const at::Tensor h = at::linear(x, down.to(dtype));                                  // [..., r]
  const at::Tensor y = at::linear(h, scale() == 1.0 ? up.to(dtype) : (up * scale()).to(dtype));  // [..., out]
  return multiplier_->apply(y);
}

at::Tensor LoraAdapter::addTo(const at::Tensor& input, const at::Tensor& output) {
  if (multiplier_->isPerSample() || input.dim() < 1 || output.scalar_type() != input.scalar_type() ||
      output.dim() != input.dim())
    return output + delta(input, output);
  const at::Tensor x = (dropout_ > 0.0 && is_training()) ? at::dropout(input, dropout_, true) : input;
  const auto dtype = input.scalar_type();
  const double s = scale() * multiplier_->scalar();
  const at::Tensor h = at::linear(x, down.to(dtype)).reshape({-1, rank_});  // [M, r]
  const at::Tensor upScaled = s == 1.0 ? up.to(dtype) : (up * s).to(dtype);  // [out, r]
  const auto outSizes = output.sizes().vec();
  // One GEMM: output + h upScaled^T, accumulated where the output is.
  return at::addmm(output.reshape({-1, output.size(-1)}), h, upScaled.t()).view(outSizes);  // [..., out]
}

at::Tensor LoraAdapter::deltaWeight() const {
  return at::matmul(up, down) * scale();  // [out, in]
}

void LoraAdapter::setWeights(const at::Tensor& newDown, const at::Tensor& newUp) {
  if (newDown.sizes() != down.sizes() || newUp.sizes() != up.sizes()) {
    std::ostringstream os;
    os << "LoRA adapter for '" << hostPath_ << "': expected down " << down.sizes() << " and up " << up.sizes()
       << ", got " << newDown.sizes() << " and " << newUp.sizes();
    throw LoadError(os.str());
  }
  torch::NoGradGuard noGrad;
  down.copy_(newDown.to(down.device(), at::kFloat));
  up.copy_(newUp.to(up.device(), at::kFloat));
}

void LoraAdapter::moveTo(const c10::Device& device) {
  if (down.device() == device && up.device() == device) return;
  // Module::to swaps the data of the registered parameters, so `down`/`up`
  // (the same tensors) and an optimizer holding them see the new device.
  to(device);
  // Module::to leaves gradients behind; a re-placement between backward and step must not.
  for (at::Tensor* p : {&down, &up})
    if (p->grad().defined() && p->grad().device() != device) p->mutable_grad() = p->grad().to(device);
}

const placement::AttachmentKind& loraAdapterKind() {
  static const placement::AttachmentKind kind = placement::AttachmentKind::registered("lora_adapter");
  return kind;
}

std::vector<std::pair<std::string, at::Tensor>> LoraAttachment::tensors() const {
  return {{"lora_A.weight", adapter_->down}, {"lora_B.weight", adapter_->up}};
}

}  // namespace strata::lora
