#pragma once
// Something that hangs off a block and lives on that block's device: a LoRA
// adapter, an EMA shadow, optimizer state, quantization scales (docs/design.md §2.2).
// Attachments are registered with Placement by the module path of their host;
// Placement moves them with their block, counts them in its snapshot and the
// audit checks them. One may instead live in host memory whatever its block's
// device (an offloaded optimizer state): it says so through residence().
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

// Where an attachment's tensors live while its block is on some device.
struct Residence {
  c10::Device device{c10::kCPU};
  bool pinned = false;  // page-locked host memory: copies to and from a card do not block the host
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
  // Where its tensors live while its block is on `blockDevice`: that device, unless
  // the attachment keeps them in host memory (pinned when the block is on CUDA, so
  // the copies to the card can be asynchronous). The audit checks against it.
  virtual Residence residence(const c10::Device& blockDevice) const { return {blockDevice, false}; }
  // Called by Placement only, with the block's device: the tensors go to
  // residence(device).
  virtual void moveTo(const c10::Device& device) = 0;
};

}  // namespace strata::placement
