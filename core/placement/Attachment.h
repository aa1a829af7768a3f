#pragma once
// Something that hangs off a block and must live on that block's device: a LoRA
// adapter, an EMA shadow, optimizer state, quantization scales (docs/design.md §2.2).
// Attachments are registered with Placement by the module path of their host;
// Placement moves them with their block and the audit checks them.
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace strata::placement {

enum class AttachmentKind { LoraAdapter, EmaShadow, OptimizerState, QuantScale };

const char* toString(AttachmentKind kind);

class Attachment {
 public:
  virtual ~Attachment() = default;
  virtual AttachmentKind kind() const = 0;
  // Module path of the host, e.g. "transformer_blocks.3.attn.to_q" (a LoRA
  // adapter) or a parameter path (an EMA shadow). Decides the owning block.
  virtual std::string hostPath() const = 0;
  // Every tensor it holds, with a name for the audit ("lora_A.weight").
  virtual std::vector<std::pair<std::string, at::Tensor>> tensors() const = 0;
  // Called by Placement only.
  virtual void moveTo(const c10::Device& device) = 0;
};

}  // namespace strata::placement
