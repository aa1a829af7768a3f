#pragma once
// The scale of a quantized nn::Linear as a placement attachment: the scale is no
// parameter of the model (the state dict keeps the checkpoint's keys), so it is
// Placement that moves it with its block and the audit that checks it sits there.
// The same holds for the fp8 weight's kept transposed copy (nn::Fp8Backward), an
// attachment of its own kind so that the GPU map shows it apart.
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "nn/Linear.h"
#include "placement/Attachment.h"

namespace strata::placement {

// "quant_scale".
const AttachmentKind& quantScaleKind();
// "fp8_transpose".
const AttachmentKind& keptTransposeKind();

class QuantScaleAttachment final : public Attachment {
 public:
  // `modulePath`: the Linear's path ("transformer_blocks.3.attn.to_q").
  QuantScaleAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear);

  AttachmentKind kind() const override { return quantScaleKind(); }
  std::string hostPath() const override { return path_; }
  // {"weight_scale", scale}.
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override;
  void moveTo(const c10::Device& device) override;

  // One attachment per quantized nn::Linear under `model`, paths from its root, and a
  // KeptTransposeAttachment for each one with Fp8Backward::Fp8KeptTranspose.
  static std::vector<std::shared_ptr<Attachment>> forModel(torch::nn::Module& model);

 private:
  std::string path_;
  std::shared_ptr<nn::LinearImpl> linear_;
};

// The kept transposed fp8 weight of a Linear (model.fp8_keep_transpose). The first
// step makes it (nn::LinearImpl::keptWeightTranspose), so before that it has no tensor;
// the trainer audits again after the first step when attachments gained tensors.
class KeptTransposeAttachment final : public Attachment {
 public:
  KeptTransposeAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear);

  AttachmentKind kind() const override { return keptTransposeKind(); }
  std::string hostPath() const override { return path_; }
  // {"weight_transposed", copy} once it exists.
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override;
  void moveTo(const c10::Device& device) override;

 private:
  std::string path_;
  std::shared_ptr<nn::LinearImpl> linear_;
};

}  // namespace strata::placement
