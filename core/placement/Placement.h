#pragma once
// Placement: the one owner of device moves (docs/design.md §2.1). It holds a model's
// stem, blocks and head with a device each, and every attachment registered to
// them (LoRA adapters, EMA shadows, optimizer state, quantization scales).
// Moving a block moves its attachments in the same call; the block runner relays
// the whole BlockIO to each block's device and to the head's; the audit lists
// every tensor that is not where its block is. Nothing else moves modules.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/DeviceInventory.h"
#include "nn/Block.h"
#include "placement/Attachment.h"
#include "placement/Planner.h"

namespace strata::placement {

// Count and bytes of the attachments of one kind ("lora_adapter", "ema_shadow",
// "optimizer_state", "quant_scale", or any kind a feature registers).
struct AttachmentFigures {
  std::string kind;
  int64_t count = 0;
  int64_t bytes = 0;
};

// Per-kind figures in the order kinds first appear; `kind` absent counts zero.
struct AttachmentTotals {
  std::vector<AttachmentFigures> kinds;
  void add(const std::string& kind, int64_t bytes);
  int64_t count(const std::string& kind) const;
  int64_t bytes(const std::string& kind) const;
  int64_t totalBytes() const;
};

// One block in a snapshot, measured from its live tensors.
struct BlockInfo {
  std::string id;                    // "transformer_blocks.3", "stem", "head"
  std::string kind;                  // "double", "single", "stem", "head", ...
  int64_t weightBytes = 0;           // parameters and buffers of the block's modules
  AttachmentTotals attachments;      // what is registered to it and lives on its device, by kind
  AttachmentTotals hostAttachments;  // registered to it but kept in host memory (offloaded optimizer state)
};

// What lives on one device: plain values, no tensors (the GUI's GPU map reads it).
struct DeviceSnapshot {
  std::string device;                // "cuda:1", "cpu"
  std::vector<BlockInfo> blocks;     // forward order, stem/head included
  int64_t weightBytes = 0;           // sum over its blocks
  AttachmentTotals attachments;      // sum over its blocks
  AttachmentTotals hostAttachments;  // sum over its blocks: host memory, not this device's
  device::MemoryFigures memory;      // allocated / reserved / cap / total (CUDA only)
};

struct PlacementSnapshot {
  std::vector<DeviceSnapshot> devices;  // in the order blocks use them
};

// One tensor that is not where it should live: its block's device, or for a
// host-resident attachment host memory (pinned when the block is on CUDA).
struct AuditIssue {
  std::string
      path;  // "transformer_blocks.3.attn.to_q.weight", "transformer_blocks.3.attn.to_q [lora_adapter] lora_A.weight"
  std::string blockId;   // owning block
  std::string expected;  // "cuda:1"; a host-resident attachment: "cpu (pinned)" or "cpu"
  std::string actual;    // "cuda:0"; "cpu (pageable)" for a host tensor that should be pinned
};

// "cuda:1 expected, cuda:0 found: <path>" one per line.
std::string formatAudit(const std::vector<AuditIssue>& issues);

// "cuda:0" -> c10::Device; throws PlacementError naming the text.
c10::Device parseDevice(const std::string& text);

// Where the caching phase runs a module that is a stem, layers and a head
// (placement::OtherModule::layerBytes): from a plan that splits `module`, its stem,
// each of its layers and its head on their devices, for the explicit-devices
// Placement below; empty `layers` when the plan keeps it whole (on plan.device).
// Throws PlacementError when the plan splits it into another number of layers.
struct LayerDevices {
  c10::Device stem{c10::kCPU};
  std::vector<c10::Device> layers;
  c10::Device head{c10::kCPU};
  bool split() const { return !layers.empty(); }
};
LayerDevices cachingLayerDevices(const CachingPlan& plan, const std::string& module, size_t layers);

class Placement final : public nn::BlockRunner {
 public:
  // `blocks` from BlockModel::blockList(); `plan` from planPlacement over the same
  // block ids in the same order. Throws PlacementError when they differ. Moves
  // nothing until apply().
  Placement(nn::BlockList blocks, const Plan& plan);
  // Explicit devices: one per block, plus stem and head.
  Placement(nn::BlockList blocks, std::vector<c10::Device> blockDevices, c10::Device stemDevice,
            c10::Device headDevice);
  // Everything on one device.
  static std::unique_ptr<Placement> singleDevice(nn::BlockList blocks, c10::Device device);

  // Moves every module of the stem, the blocks and the head, and every registered
  // attachment, to its device.
  void apply();
  bool applied() const { return applied_; }

  // Registers an attachment with the block that owns its host path (the longest
  // block id that is a prefix at a '.' boundary; else the stem's or head's module
  // paths) and moves it to that block's device now. Throws PlacementError when no
  // block owns the path.
  void attach(std::shared_ptr<Attachment> attachment);
  void attachAll(const std::vector<std::shared_ptr<Attachment>>& attachments);
  // Unregisters (by identity); the attachment stays where it is.
  void detach(const Attachment* attachment);
  // Unregisters every attachment of `kind`.
  void detachAll(AttachmentKind kind);
  std::vector<std::shared_ptr<Attachment>> attachments() const;
  // Moves every registered attachment of `kind` to where it lives, its block
  // unmoved: after a load replaced its tensors (a resumed optimizer state).
  void placeAttachments(AttachmentKind kind);

  // Re-placement: moves one block ("stem", "head" or a block id) and its
  // attachments to `device`.
  void moveBlock(const std::string& blockId, const c10::Device& device);

  // The block that owns a module or parameter path, and its device.
  std::string ownerOf(const std::string& path) const;
  c10::Device deviceOf(const std::string& path) const;
  c10::Device blockDevice(size_t blockIndex) const;
  c10::Device stemDevice() const { return units_.front().device; }
  c10::Device headDevice() const { return units_.back().device; }
  size_t blockCount() const { return units_.size() - 2; }
  // Distinct devices, in the order the forward pass uses them.
  std::vector<c10::Device> devices() const;

  // nn::BlockRunner: the whole BlockIO goes to the block's device, then the block runs.
  nn::BlockIO run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) override;
  nn::BlockIO toHead(const nn::BlockIO& io) override;

  PlacementSnapshot snapshot() const;

  // Every parameter (and its gradient), buffer and attachment tensor that is not
  // on its block's device. Empty when all is well.
  std::vector<AuditIssue> audit() const;
  // Throws PlacementError listing the issues (`when`: "before step 1").
  void auditOrThrow(const std::string& when) const;

 private:
  struct Unit {
    nn::BlockSlot slot;
    c10::Device device{c10::kCPU};
    std::vector<std::shared_ptr<Attachment>> attachments;
  };
  size_t unitOf(const std::string& path) const;  // index into units_
  void moveUnit(Unit& unit);

  std::vector<Unit> units_;             // stem, blocks..., head
  std::map<std::string, size_t> byId_;  // block id -> unit index
  bool applied_ = false;
};

}  // namespace strata::placement
