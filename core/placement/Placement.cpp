#include "placement/Placement.h"

#include <algorithm>
#include <sstream>

#include "common/Error.h"

namespace strata::placement {

namespace {

std::string deviceText(const c10::Device& d) { return d.str(); }

bool hasPrefix(const std::string& path, const std::string& prefix) {
  if (prefix.empty()) return false;
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.';
}

int64_t tensorBytes(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) : 0;
}

std::string joinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

}  // namespace

c10::Device parseDevice(const std::string& text) {
  try {
    return c10::Device(text);
  } catch (const std::exception&) {
    throw PlacementError("device '" + text + "': expected cpu or cuda:N");
  }
}

LayerDevices cachingLayerDevices(const CachingPlan& plan, const std::string& module, size_t layers) {
  LayerDevices out;
  if (!plan.device.empty()) out.stem = out.head = parseDevice(plan.device);
  if (plan.splitModule != module || module.empty()) return out;
  if (plan.layerDevice.size() != layers)
    throw PlacementError("caching plan: " + module + " is split into " + std::to_string(plan.layerDevice.size()) +
                         " layers, the model built has " + std::to_string(layers) +
                         " (its config changed since the plan was made?)");
  out.stem = parseDevice(plan.splitStemDevice);
  for (const auto& d : plan.layerDevice) out.layers.push_back(parseDevice(d));
  out.head = parseDevice(plan.splitHeadDevice);
  return out;
}

std::string formatAudit(const std::vector<AuditIssue>& issues) {
  std::ostringstream os;
  for (const auto& i : issues) {
    os << i.path << ": expected " << i.expected << " (block " << i.blockId << "), found " << i.actual << "\n";
  }
  return os.str();
}

Placement::Placement(nn::BlockList blocks, std::vector<c10::Device> blockDevices, c10::Device stemDevice,
                     c10::Device headDevice) {
  if (blockDevices.size() != blocks.blocks.size()) {
    throw PlacementError("placement: " + std::to_string(blockDevices.size()) + " devices for " +
                         std::to_string(blocks.blocks.size()) + " blocks");
  }
  units_.push_back(Unit{std::move(blocks.stem), stemDevice, {}});
  for (size_t i = 0; i < blocks.blocks.size(); ++i) {
    units_.push_back(Unit{std::move(blocks.blocks[i]), blockDevices[i], {}});
  }
  units_.push_back(Unit{std::move(blocks.head), headDevice, {}});
  if (units_.front().slot.id.empty()) units_.front().slot.id = "stem";
  if (units_.back().slot.id.empty()) units_.back().slot.id = "head";
  for (size_t u = 0; u < units_.size(); ++u) {
    const std::string& id = units_[u].slot.id;
    if (!byId_.emplace(id, u).second) throw PlacementError("placement: block id '" + id + "' twice");
  }
}

Placement::Placement(nn::BlockList blocks, const Plan& plan)
    : Placement(
          [&] {
            if (plan.blockDevice.size() != blocks.blocks.size()) {
              throw PlacementError("placement: the plan has " + std::to_string(plan.blockDevice.size()) +
                                   " blocks, the model " + std::to_string(blocks.blocks.size()));
            }
            // The plan's block ids must be the model's, in the same order.
            std::vector<std::string> planIds;
            for (const auto& dp : plan.devices) {
              for (const auto& id : dp.blockIds) planIds.push_back(id);
            }
            for (size_t i = 0; i < blocks.blocks.size(); ++i) {
              if (i >= planIds.size() || planIds[i] != blocks.blocks[i].id) {
                throw PlacementError("placement: plan block " + std::to_string(i) + " is '" +
                                     (i < planIds.size() ? planIds[i] : std::string("(none)")) + "', the model's is '" +
                                     blocks.blocks[i].id + "'");
              }
            }
            return std::move(blocks);
          }(),
          [&] {
            std::vector<c10::Device> d;
            for (const auto& s : plan.blockDevice) d.push_back(parseDevice(s));
            return d;
          }(),
          parseDevice(plan.stemDevice.empty() ? "cpu" : plan.stemDevice),
          parseDevice(plan.headDevice.empty() ? "cpu" : plan.headDevice)) {}

std::unique_ptr<Placement> Placement::singleDevice(nn::BlockList blocks, c10::Device device) {
  std::vector<c10::Device> devs(blocks.blocks.size(), device);
  return std::make_unique<Placement>(std::move(blocks), std::move(devs), device, device);
}

void Placement::moveUnit(Unit& unit) {
  for (auto& nm : unit.slot.modules) {
    if (nm.module) nm.module->to(unit.device);
  }
  for (auto& a : unit.attachments) a->moveTo(unit.device);
}

void Placement::apply() {
  for (auto& u : units_) moveUnit(u);
  applied_ = true;
}

size_t Placement::unitOf(const std::string& path) const {
  // Longest block id that is a prefix at a '.' boundary.
  std::string probe = path;
  for (;;) {
    auto it = byId_.find(probe);
    if (it != byId_.end()) return it->second;
    const size_t dot = probe.rfind('.');
    if (dot == std::string::npos) break;
    probe.resize(dot);
  }
  // Modules outside the blocks belong to the stem or head by their module paths.
  for (size_t u : {size_t{0}, units_.size() - 1}) {
    for (const auto& nm : units_[u].slot.modules) {
      if (hasPrefix(path, nm.path)) return u;
    }
  }
  throw PlacementError("placement: no block owns '" + path + "' (not under a block id, nor a stem or head module)");
}

std::string Placement::ownerOf(const std::string& path) const { return units_[unitOf(path)].slot.id; }

c10::Device Placement::deviceOf(const std::string& path) const { return units_[unitOf(path)].device; }

c10::Device Placement::blockDevice(size_t blockIndex) const {
  if (blockIndex + 2 > units_.size()) {
    throw PlacementError("placement: block index " + std::to_string(blockIndex) + " out of range (" +
                         std::to_string(blockCount()) + " blocks)");
  }
  return units_[blockIndex + 1].device;
}

std::vector<c10::Device> Placement::devices() const {
  std::vector<c10::Device> out;
  for (const auto& u : units_) {
    if (std::find(out.begin(), out.end(), u.device) == out.end()) out.push_back(u.device);
  }
  return out;
}

void Placement::attach(std::shared_ptr<Attachment> attachment) {
  if (!attachment) throw PlacementError("placement: null attachment");
  Unit& unit = units_[unitOf(attachment->hostPath())];
  for (const auto& a : unit.attachments) {
    if (a.get() == attachment.get()) return;  // already registered
  }
  attachment->moveTo(unit.device);
  unit.attachments.push_back(std::move(attachment));
}

void Placement::attachAll(const std::vector<std::shared_ptr<Attachment>>& attachments) {
  for (const auto& a : attachments) attach(a);
}

void Placement::detach(const Attachment* attachment) {
  for (auto& u : units_) {
    u.attachments.erase(std::remove_if(u.attachments.begin(), u.attachments.end(),
                                       [&](const auto& a) { return a.get() == attachment; }),
                        u.attachments.end());
  }
}

void Placement::detachAll(AttachmentKind kind) {
  for (auto& u : units_) {
    u.attachments.erase(
        std::remove_if(u.attachments.begin(), u.attachments.end(), [&](const auto& a) { return a->kind() == kind; }),
        u.attachments.end());
  }
}

void Placement::placeAttachments(AttachmentKind kind) {
  for (auto& u : units_)
    for (auto& a : u.attachments)
      if (a->kind() == kind) a->moveTo(u.device);
}

std::vector<std::shared_ptr<Attachment>> Placement::attachments() const {
  std::vector<std::shared_ptr<Attachment>> out;
  for (const auto& u : units_) out.insert(out.end(), u.attachments.begin(), u.attachments.end());
  return out;
}

void Placement::moveBlock(const std::string& blockId, const c10::Device& device) {
  auto it = byId_.find(blockId);
  if (it == byId_.end()) throw PlacementError("placement: no block '" + blockId + "'");
  Unit& unit = units_[it->second];
  unit.device = device;
  moveUnit(unit);
}

nn::BlockIO Placement::run(size_t blockIndex, nn::Block& block, const nn::BlockIO& in) {
  return block.forward(in.to(blockDevice(blockIndex)));
}

nn::BlockIO Placement::toHead(const nn::BlockIO& io) { return io.to(headDevice()); }

void AttachmentTotals::add(const std::string& kind, int64_t bytes) {
  for (auto& k : kinds) {
    if (k.kind != kind) continue;
    k.count++;
    k.bytes += bytes;
    return;
  }
  kinds.push_back({kind, 1, bytes});
}

int64_t AttachmentTotals::count(const std::string& kind) const {
  for (const auto& k : kinds)
    if (k.kind == kind) return k.count;
  return 0;
}

int64_t AttachmentTotals::bytes(const std::string& kind) const {
  for (const auto& k : kinds)
    if (k.kind == kind) return k.bytes;
  return 0;
}

int64_t AttachmentTotals::totalBytes() const {
  int64_t n = 0;
  for (const auto& k : kinds) n += k.bytes;
  return n;
}

PlacementSnapshot Placement::snapshot() const {
  PlacementSnapshot snap;
  auto slotFor = [&](const c10::Device& d) -> DeviceSnapshot& {
    const std::string label = deviceText(d);
    for (auto& ds : snap.devices) {
      if (ds.device == label) return ds;
    }
    DeviceSnapshot ds;
    ds.device = label;
    if (d.is_cuda()) {
      ds.memory = device::memoryFigures(d.has_index() ? d.index() : 0);
    } else if (d.is_cpu()) {
      ds.memory.totalBytes = device::cpuDevice().totalBytes;
    }
    snap.devices.push_back(ds);
    return snap.devices.back();
  };
  for (const auto& u : units_) {
    BlockInfo block{u.slot.id, u.slot.kind, 0, {}, {}};
    for (const auto& nm : u.slot.modules) {
      if (!nm.module) continue;
      for (const auto& p : nm.module->parameters(true)) block.weightBytes += tensorBytes(p);
      for (const auto& b : nm.module->buffers(true)) block.weightBytes += tensorBytes(b);
    }
    DeviceSnapshot& ds = slotFor(u.device);
    ds.weightBytes += block.weightBytes;
    for (const auto& a : u.attachments) {
      // Host memory of an attachment on a card's block is not the card's (the GPU map reads this).
      int64_t bytes = 0, hostBytes = 0;
      for (const auto& nt : a->tensors()) {
        const bool onHost = nt.second.defined() && nt.second.is_cpu() && !u.device.is_cpu();
        (onHost ? hostBytes : bytes) += tensorBytes(nt.second);
      }
      if (bytes > 0 || hostBytes == 0) {
        block.attachments.add(a->kind().name(), bytes);
        ds.attachments.add(a->kind().name(), bytes);
      }
      if (hostBytes > 0) {
        block.hostAttachments.add(a->kind().name(), hostBytes);
        ds.hostAttachments.add(a->kind().name(), hostBytes);
      }
    }
    ds.blocks.push_back(std::move(block));
  }
  return snap;
}

std::vector<AuditIssue> Placement::audit() const {
  std::vector<AuditIssue> issues;
  for (const auto& u : units_) {
    const std::string expected = deviceText(u.device);
    auto check = [&](const std::string& path, const at::Tensor& t) {
      if (!t.defined() || t.device() == u.device) return;
      issues.push_back(AuditIssue{path, u.slot.id, expected, deviceText(t.device())});
    };
    for (const auto& nm : u.slot.modules) {
      if (!nm.module) continue;
      for (const auto& p : nm.module->named_parameters(true)) {
        const std::string path = joinPath(nm.path, p.key());
        check(path, p.value());
        check(path + ".grad", p.value().grad());
      }
      for (const auto& b : nm.module->named_buffers(true)) check(joinPath(nm.path, b.key()), b.value());
    }
    for (const auto& a : u.attachments) {
      const std::string base = a->hostPath() + " [" + a->kind().name() + "] ";
      const Residence r = a->residence(u.device);
      if (r.device == u.device && !r.pinned) {
        for (const auto& nt : a->tensors()) check(base + nt.first, nt.second);
        continue;
      }
      // Kept in host memory: pinned where the block is on CUDA, or the copies to the card would block the host.
      const std::string want = deviceText(r.device) + (r.pinned ? " (pinned)" : "");
      for (const auto& nt : a->tensors()) {
        const at::Tensor& t = nt.second;
        if (!t.defined()) continue;
        if (t.device() != r.device) {
          issues.push_back(AuditIssue{base + nt.first, u.slot.id, want, deviceText(t.device())});
        } else if (r.pinned && !t.is_pinned()) {
          issues.push_back(AuditIssue{base + nt.first, u.slot.id, want, deviceText(t.device()) + " (pageable)"});
        }
      }
    }
  }
  return issues;
}

void Placement::auditOrThrow(const std::string& when) const {
  const auto issues = audit();
  if (issues.empty()) return;
  throw PlacementError("placement audit " + when + ": " + std::to_string(issues.size()) +
                       " tensor(s) not where they belong (their block's device, or pinned host memory for "
                       "state kept off the card):\n" +
                       formatAudit(issues));
}

}  // namespace strata::placement
