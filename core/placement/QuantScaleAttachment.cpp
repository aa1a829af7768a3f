#include "placement/QuantScaleAttachment.h"

namespace strata::placement {

const AttachmentKind& quantScaleKind() {
  static const auto kind = AttachmentKind::registered("quant_scale");
  return kind;
}

QuantScaleAttachment::QuantScaleAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear)
    : path_(std::move(modulePath)), linear_(std::move(linear)) {}

std::vector<std::pair<std::string, at::Tensor>> QuantScaleAttachment::tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (linear_->weightScale.defined()) out.emplace_back("weight_scale", linear_->weightScale);
  if (linear_->keptWeightTranspose().defined()) out.emplace_back("weight_transposed", linear_->keptWeightTranspose());
  return out;
}

void QuantScaleAttachment::moveTo(const c10::Device& device) {
  if (linear_->weightScale.defined() && linear_->weightScale.device() != device)
    linear_->weightScale = linear_->weightScale.to(device);
  linear_->moveKeptWeightTranspose(device);
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
