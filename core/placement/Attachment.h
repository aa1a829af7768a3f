#pragma once
// Something that hangs off a block and must live on that block's device: a LoRA
// adapter, an EMA shadow, optimizer state, quantization scales (docs/design.md §2.2).
// Attachments are registered with Placement by the module path of their host;
// Placement moves them with their block, counts them in its snapshot and the
// audit checks them.
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace strata::placement {

// The kind of an attachment, an open set: a feature registers its kind by name
// in its own code, and placement needs no edit for a new one:
//   const placement::AttachmentKind& quantScaleKind() {
//     static const auto kind = placement::AttachmentKind::registered("quant_scale");
//     return kind;
//   }
// Kinds compare by name; snapshots and the audit report the name.
class AttachmentKind {
 public:
  // The kind named `name` (lower_snake_case: a-z, 0-9, '_'), registered on first
  // use. Throws strata::PlacementError for an empty or malformed name.
  static AttachmentKind registered(const std::string& name);
  // Every kind registered in this process so far, in the order of registration.
  static std::vector<AttachmentKind> all();

  const std::string& name() const { return *name_; }
  bool operator==(const AttachmentKind& o) const { return name_ == o.name_; }
  bool operator!=(const AttachmentKind& o) const { return name_ != o.name_; }

 private:
  explicit AttachmentKind(const std::string* name) : name_(name) {}
  const std::string* name_;  // interned in the registry, so equal names share one pointer
};

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
