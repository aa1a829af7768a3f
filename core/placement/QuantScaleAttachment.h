#pragma once
// The scale of a quantized nn::Linear as a placement attachment: the scale is no
// parameter of the model (the state dict keeps the checkpoint's keys), so it is
// Placement that moves it with its block and the audit that checks it sits there.
// The same holds for the fp8 weight's kept transposed copy (nn::Fp8Backward).
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "nn/Linear.h"
#include "placement/Attachment.h"

namespace strata::placement {

// "quant_scale".
const AttachmentKind& quantScaleKind();

class QuantScaleAttachment final : public Attachment {
 public:
  // `modulePath`: the Linear's path ("transformer_blocks.3.attn.to_q").
  QuantScaleAttachment(std::string modulePath, std::shared_ptr<nn::LinearImpl> linear);

  AttachmentKind kind() const override { return quantScaleKind(); }
  std::string hostPath() const override { return path_; }
  // {"weight_scale", scale}, and {"weight_transposed", copy} once a kept copy exists.
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override;
  void moveTo(const c10::Device& device) override;

  // One attachment per quantized nn::Linear under `model`, paths from its root.
  static std::vector<std::shared_ptr<Attachment>> forModel(torch::nn::Module& model);

 private:
  std::string path_;
  std::shared_ptr<nn::LinearImpl> linear_;
};

}  // namespace strata::placement
