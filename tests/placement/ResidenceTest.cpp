// Attachments that live in host memory whatever their block's device (an offloaded
// optimizer state, train.offload_optimizer_state): the audit expects them there and
// pinned where the block is on CUDA, the snapshot counts them apart from the device,
// and placeAttachments puts a reloaded state back where it lives. The `meta` device
// stands in for a card (see PlacementTest.cpp); the pinned case on a real card is in
// tests/gpu/test_optimizer_gpu.cpp.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include "common/Error.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/Placement.h"

#include "ToyModel.h"

using namespace strata;
using namespace strata::placement;

namespace {

const c10::Device kCpu(c10::kCPU);
const c10::Device kMeta(c10::kMeta);

// One host tensor; `pinned`: wants pinned host memory whatever the block's device
// (a CPU-only machine cannot pin, so this is how the pageable case is reached).
class HostProbe final : public Attachment {
 public:
  HostProbe(std::string host, bool pinned) : host_(std::move(host)), pinned_(pinned), t_(at::zeros({4})) {}
  AttachmentKind kind() const override { return AttachmentKind::registered("host_probe"); }
  std::string hostPath() const override { return host_; }
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override { return {{"t", t_}}; }
  Residence residence(const c10::Device&) const override { return {kCpu, pinned_}; }
  void moveTo(const c10::Device& device) override { moves.push_back(device.str()); }
  std::vector<std::string> moves;
  at::Tensor& tensor() { return t_; }

 private:
  std::string host_;
  bool pinned_;
  at::Tensor t_;
};

// One tensor on its block's device.
class DeviceProbe final : public Attachment {
 public:
  explicit DeviceProbe(std::string host) : host_(std::move(host)), t_(at::zeros({8})) {}
  AttachmentKind kind() const override { return AttachmentKind::registered("device_probe"); }
  std::string hostPath() const override { return host_; }
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override { return {{"t", t_}}; }
  void moveTo(const c10::Device& device) override {
    ++moves;
    t_ = at::zeros(t_.sizes(), at::TensorOptions().device(device));
  }
  int moves = 0;

 private:
  std::string host_;
  at::Tensor t_;
};

// blocks.0 on the cpu, blocks.1 on meta (no parameters, so nothing refuses the move).
std::unique_ptr<Placement> cpuAndMeta() {
  auto p = std::make_unique<Placement>(test::emptyBlocks(2), std::vector<c10::Device>{kCpu, kMeta}, kCpu, kCpu);
  p->apply();
  return p;
}

}  // namespace

TEST(Residence, ByDefaultAnAttachmentLivesOnItsBlocksDevice) {
  DeviceProbe probe("blocks.1.x");
  const Residence r = probe.residence(kMeta);
  EXPECT_EQ(r.device, kMeta);
  EXPECT_FALSE(r.pinned);
}

TEST(Residence, AHostResidentAttachmentIsAuditedAgainstHostMemory) {
  auto p = cpuAndMeta();
  auto host = std::make_shared<HostProbe>("blocks.1.attn.to_q.lora_A.weight", false);
  auto onDevice = std::make_shared<DeviceProbe>("blocks.1.attn.to_q");
  p->attachAll({host, onDevice});
  // The host tensor under a meta block is where it belongs; so is the device one.
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  EXPECT_EQ(host->moves, (std::vector<std::string>{"meta"}));  // told its block's device

  // Moved onto the block's device behind Placement's back: reported, host memory expected.
  host->tensor() = at::zeros({4}, at::TensorOptions().device(kMeta));
  auto issues = p->audit();
  ASSERT_EQ(issues.size(), 1u) << formatAudit(issues);
  EXPECT_EQ(issues[0].path, "blocks.1.attn.to_q.lora_A.weight [host_probe] t");
  EXPECT_EQ(issues[0].blockId, "blocks.1");
  EXPECT_EQ(issues[0].expected, "cpu");
  EXPECT_EQ(issues[0].actual, "meta");
  try {
    p->auditOrThrow("before step 1");
    ADD_FAILURE() << "the audit did not throw";
  } catch (const PlacementError& e) {
    EXPECT_NE(std::string(e.what()).find("pinned host memory for state kept off the card"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[host_probe] t: expected cpu (block blocks.1), found meta"),
              std::string::npos)
        << e.what();
  }
}

TEST(Residence, APageableTensorWherePinnedMemoryIsExpectedIsReported) {
  auto p = cpuAndMeta();
  auto pinned = std::make_shared<HostProbe>("blocks.1.ff.lora_B.weight", true);
  p->attach(pinned);
  const auto issues = p->audit();
  ASSERT_EQ(issues.size(), 1u) << formatAudit(issues);
  EXPECT_EQ(issues[0].expected, "cpu (pinned)");
  EXPECT_EQ(issues[0].actual, "cpu (pageable)");
  if (at::hasCUDA()) {  // a pinned tensor passes (only where this LibTorch can pin)
    pinned->tensor() = at::zeros({4}).pin_memory();
    EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  }
}

TEST(Residence, TheSnapshotCountsHostBytesApartFromTheDevice) {
  auto p = cpuAndMeta();
  p->attachAll({std::make_shared<HostProbe>("blocks.1.a", false), std::make_shared<DeviceProbe>("blocks.1.b"),
                std::make_shared<HostProbe>("blocks.0.a", false)});
  const auto snap = p->snapshot();
  const DeviceSnapshot* meta = nullptr;
  const DeviceSnapshot* cpu = nullptr;
  for (const auto& d : snap.devices) (d.device == "meta" ? meta : cpu) = &d;
  ASSERT_TRUE(meta && cpu);
  // On the meta block: the device probe's 32 bytes are the device's, the host probe's 16 are not.
  EXPECT_EQ(meta->attachments.totalBytes(), 32);
  EXPECT_EQ(meta->attachments.count("host_probe"), 0);
  EXPECT_EQ(meta->hostAttachments.bytes("host_probe"), 16);
  EXPECT_EQ(meta->hostAttachments.count("host_probe"), 1);
  ASSERT_EQ(meta->blocks.size(), 1u);
  EXPECT_EQ(meta->blocks[0].hostAttachments.totalBytes(), 16);
  // On a cpu block host memory is the device's own.
  EXPECT_EQ(cpu->attachments.bytes("host_probe"), 16);
  EXPECT_EQ(cpu->hostAttachments.totalBytes(), 0);
}

TEST(Residence, OptimizerStateInHostMemoryStaysOffTheBlocksDevice) {
  auto param = at::randn({4, 6}).requires_grad_(true);
  auto optimizer = std::make_shared<torch::optim::AdamW>(std::vector<at::Tensor>{param});
  param.mutable_grad() = at::ones_like(param);
  optimizer->step();  // the state exists, on the cpu
  OptimizerStateAttachment onHost("blocks.1.lora_A.weight", optimizer, param, /*inHostMemory=*/true);
  OptimizerStateAttachment onCard("blocks.1.lora_A.weight", optimizer, param);
  EXPECT_EQ(onHost.residence(c10::Device(c10::kCUDA, 1)).device, kCpu);
  EXPECT_TRUE(onHost.residence(c10::Device(c10::kCUDA, 1)).pinned);
  EXPECT_FALSE(onHost.residence(kCpu).pinned);  // host memory is the cpu block's own: nothing to pin
  EXPECT_EQ(onCard.residence(c10::Device(c10::kCUDA, 1)).device, c10::Device(c10::kCUDA, 1));

  auto p = cpuAndMeta();
  auto attachment = std::make_shared<OptimizerStateAttachment>("blocks.1.lora_A.weight", optimizer, param, true);
  const at::Tensor before = attachment->tensors().at(0).second;
  p->attach(attachment);  // blocks.1 is on meta: the state stays in host memory
  EXPECT_TRUE(attachment->tensors().at(0).second.is_same(before));
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  EXPECT_EQ(p->snapshot().devices.back().hostAttachments.bytes("optimizer_state"), 2 * 24 * 4);
}

TEST(Residence, PlaceAttachmentsPutsAReloadedStateWhereItLives) {
  auto param = at::randn({4, 6}).requires_grad_(true);
  auto optimizer = std::make_shared<torch::optim::AdamW>(std::vector<at::Tensor>{param});
  auto p = cpuAndMeta();
  auto state = std::make_shared<OptimizerStateAttachment>("blocks.1.lora_A.weight", optimizer, param);
  auto other = std::make_shared<DeviceProbe>("blocks.1.b");
  p->attachAll({state, other});
  // A resume loads the state next to its parameter (here the cpu), after it was attached.
  param.mutable_grad() = at::ones_like(param);
  optimizer->step();
  ASSERT_FALSE(p->audit().empty());
  p->placeAttachments(optimizerStateKind());
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  for (const auto& nt : state->tensors()) EXPECT_EQ(nt.second.device(), kMeta) << nt.first;
  EXPECT_EQ(other->moves, 1);  // attach only: other kinds are left alone
}
