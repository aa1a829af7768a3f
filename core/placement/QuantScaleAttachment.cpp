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

std::vector<std::shared_ptr<Attachment>> QuantScaleAttachment::forModel(torch::nn::Module& model) {
  std::vector<std::shared_ptr<Attachment>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value());
    if (lin && lin->quantType() != nn::QuantType::None)
      out.push_back(std::make_shared<QuantScaleAttachment>(item.key(), lin));
  }
  return out;
}

}  // namespace strata::placement
