#include "placement/QuantScaleAttachment.h"

namespace strata::placement {

const AttachmentKind& quantScaleKind() {
  static const auto kind = AttachmentKind::registered("quant_scale");
  return kind;
}

QuantScaleAttachment::QuantScaleAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear)
    : path_(std::move(modulePath)), linear_(std::move(linear)) {}

std::vector<std::pair<std::string, at::Tensor>> QuantScaleAttachment::tensors() const {
  if (!linear_->weightScale.defined()) return {};
  return {{"weight_scale", linear_->weightScale}};
}

void QuantScaleAttachment::moveTo(const c10::Device& device) {
  if (linear_->weightScale.defined() && linear_->weightScale.device() != device)
    linear_->weightScale = linear_->weightScale.to(device);
}

const AttachmentKind& keptTransposeKind() {
  static const auto kind = AttachmentKind::registered("fp8_transpose");
  return kind;
}

KeptTransposeAttachment::KeptTransposeAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear)
    : path_(std::move(modulePath)), linear_(std::move(linear)) {}

std::vector<std::pair<std::string, at::Tensor>> KeptTransposeAttachment::tensors() const {
  if (!linear_->keptWeightTranspose().defined()) return {};
  return {{"weight_transposed", linear_->keptWeightTranspose()}};
}

void KeptTransposeAttachment::moveTo(const c10::Device& device) { linear_->moveKeptWeightTranspose(device); }

std::vector<std::shared_ptr<Attachment>> QuantScaleAttachment::forModel(torch::nn::Module& model) {
  std::vector<std::shared_ptr<Attachment>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value());
    if (!lin || lin->quantType() == nn::QuantType::None) continue;
    out.push_back(std::make_shared<QuantScaleAttachment>(item.key(), lin));
    if (lin->fp8Backward() == nn::Fp8Backward::Fp8KeptTranspose)
      out.push_back(std::make_shared<KeptTransposeAttachment>(item.key(), lin));
  }
  return out;
}

}  // namespace strata::placement
