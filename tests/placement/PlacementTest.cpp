// Placement on CPU: the registry, the plan, the relay and the audit.
//
// What a CPU test can prove here: this machine has one real device. The `meta`
// device stands in for a second one where LibTorch allows it: tensors can be
// copied to meta (attachments, BlockIO fields, EMA shadows and optimizer state
// move for real), but a module cannot (Module::to(meta) is refused by set_data in
// LibTorch 1.13). So blocks with parameters are planned on meta without being
// moved, and the audit reports them; the moves of real blocks between cuda:0 and
// cuda:1 are tested in tests/gpu/test_placement_gpu.cpp.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <map>
#include <type_traits>

#include "common/Error.h"
#include "lora/LoraAdapter.h"
#include "placement/MeasureBlocks.h"
#include "placement/OptimizerStateAttachment.h"
#include "placement/Placement.h"
#include "train/Ema.h"
#include "ToyModel.h"

using namespace strata;
using namespace strata::placement;
using strata::test::addToyAdapters;
using strata::test::emptyBlocks;
using strata::test::RecordingBlock;
using strata::test::ToyAdapters;
using strata::test::ToyModel;

namespace {

const c10::Device kCpu(c10::kCPU);
const c10::Device kMeta(c10::kMeta);

// Kinds by name, as any feature registers its own (placement defines none of these but optimizer_state).
AttachmentKind kind(const std::string& name) { return AttachmentKind::registered(name); }

// An attachment that holds one tensor and records every move it is given.
class ProbeAttachment final : public Attachment {
 public:
  ProbeAttachment(AttachmentKind kind, std::string host, int64_t numel = 4)
      : kind_(kind), host_(std::move(host)), t_(at::zeros({numel})) {}
  AttachmentKind kind() const override { return kind_; }
  std::string hostPath() const override { return host_; }
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override { return {{"t", t_}}; }
  void moveTo(const c10::Device& device) override {
    moves.push_back(device.str());
    // A meta tensor has no data to copy back; a fresh one stands for it.
    t_ = t_.is_meta() && device != t_.device() ? at::zeros(t_.sizes(), at::TensorOptions().device(device))
                                               : t_.to(device);
  }
  std::vector<std::string> moves;
  at::Tensor& tensor() { return t_; }

 private:
  AttachmentKind kind_;
  std::string host_;
  at::Tensor t_;
};

// Blocks [0, split) on cpu, the rest planned on meta; stem and head on cpu.
std::unique_ptr<Placement> planned(nn::BlockList list, size_t split) {
  std::vector<c10::Device> devs;
  for (size_t i = 0; i < list.blocks.size(); ++i) devs.push_back(i < split ? kCpu : kMeta);
  return std::make_unique<Placement>(std::move(list), devs, kCpu, kCpu);
}

bool anyIssueFor(const std::vector<AuditIssue>& issues, const std::string& needle) {
  for (const auto& i : issues) {
    if (i.path.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST(PlacementRegistry, OwnerIsTheLongestBlockIdPrefix) {
  ToyModel model(4, 8, 12);
  auto p = Placement::singleDevice(model.blockList(), kCpu);
  EXPECT_EQ(p->ownerOf("blocks.1.fc1"), "blocks.1");
  EXPECT_EQ(p->ownerOf("blocks.10.fc1.weight"), "blocks.10");  // not blocks.1
  EXPECT_EQ(p->ownerOf("blocks.11"), "blocks.11");
  EXPECT_EQ(p->ownerOf("x_embedder.weight"), "stem");
  EXPECT_EQ(p->ownerOf("proj_out"), "head");
  EXPECT_THROW(p->ownerOf("nowhere.weight"), PlacementError);
  EXPECT_THROW(p->ownerOf("proj_outer"), PlacementError);  // a prefix only at a '.' boundary
  EXPECT_THROW(p->attach(std::make_shared<ProbeAttachment>(kind("quant_scale"), "nowhere")), PlacementError);
}

TEST(PlacementRegistry, BuildsFromAPlanWithTheModelsBlockIds) {
  ToyModel model(4, 8, 6);
  const ModelShapes shapes = measureBlocks(model.blockList(), [](const std::string&) { return true; });
  ASSERT_EQ(shapes.blocks.size(), 6u);
  EXPECT_EQ(shapes.blocks[0].loraLinears.size(), 3u);  // fc1, fc2, txt_proj
  EXPECT_EQ(shapes.blocks[0].paramCount, (8 * 16 + 16) + (16 * 8 + 8) + (8 * 8 + 8));
  EXPECT_EQ(shapes.stem.paramCount, 4 * 8 + 8);
  PlannerInput in = estimateInput(shapes.stem, shapes.blocks, shapes.head, CostOptions{});
  in.devices = {DeviceBudget{"cpu", "host", 0}, DeviceBudget{"meta", "meta", 0}};
  const Plan plan = planPlacement(in);
  Placement p(model.blockList(), plan);
  EXPECT_EQ(p.blockDevice(0), kCpu);
  EXPECT_EQ(p.blockDevice(5), kMeta);
  EXPECT_EQ(p.devices(), (std::vector<c10::Device>{kCpu, kMeta}));
  ToyModel other(4, 8, 5);  // a plan for other blocks is refused
  EXPECT_THROW(Placement(other.blockList(), plan), PlacementError);
}

TEST(PlacementSeedBug1, AdaptersCreatedBeforeTheSplitAreRegisteredWithTheirHostsBlock) {
  ToyModel model(4, 8, 4);
  ToyAdapters lora = addToyAdapters(model, 2);  // created before any placement, on the cpu
  auto p = planned(model.blockList(), 2);
  // Registration is by host path: each adapter lands in its host's block.
  std::vector<std::shared_ptr<ProbeAttachment>> probes;
  for (const auto& a : lora.adapters) {
    const std::string block = a->hostPath().substr(0, a->hostPath().find('.', 7));
    EXPECT_EQ(p->ownerOf(a->hostPath()), block);
    probes.push_back(std::make_shared<ProbeAttachment>(kind("lora_adapter"), a->hostPath()));
    p->attach(probes.back());
    // Moved to the block's device at once, not at some later move.
    ASSERT_EQ(probes.back()->moves.size(), 1u);
    EXPECT_EQ(probes.back()->moves[0], p->deviceOf(a->hostPath()).str());
    EXPECT_EQ(probes.back()->tensor().device(), p->deviceOf(a->hostPath()));
  }
  EXPECT_EQ(probes.back()->tensor().device(), kMeta);  // blocks.3
  // The real adapters on an all-cpu placement: with their hosts, audit clean.
  auto cpu = Placement::singleDevice(model.blockList(), kCpu);
  cpu->attachAll(lora.attachments);
  cpu->apply();
  for (const auto& a : lora.adapters) EXPECT_EQ(a->device(), a->host()->weight.device());
  EXPECT_TRUE(cpu->audit().empty()) << formatAudit(cpu->audit());
  EXPECT_EQ(cpu->attachments().size(), lora.adapters.size());
  cpu->attachAll(lora.attachments);  // registering twice is a no-op
  EXPECT_EQ(cpu->attachments().size(), lora.adapters.size());
}

TEST(PlacementSeedBug2, AttachmentsFollowEveryLaterMove) {
  auto p = planned(emptyBlocks(4), 2);
  auto lora = std::make_shared<ProbeAttachment>(kind("lora_adapter"), "blocks.3.attn.to_q");
  auto ema = std::make_shared<ProbeAttachment>(kind("ema_shadow"), "blocks.3.attn.to_q.lora_A.weight");
  auto opt = std::make_shared<ProbeAttachment>(kind("optimizer_state"), "blocks.3.attn.to_q.lora_A.weight");
  auto other = std::make_shared<ProbeAttachment>(kind("lora_adapter"), "blocks.2.attn.to_q");
  p->attachAll({lora, ema, opt, other});
  p->apply();
  for (const auto& target : {kCpu, kMeta, kCpu, kMeta}) {
    p->moveBlock("blocks.3", target);
    for (const auto& a : {lora, ema, opt}) {
      EXPECT_EQ(a->moves.back(), target.str());
      EXPECT_EQ(a->tensor().device(), target);
    }
    EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  }
  EXPECT_EQ(other->moves.size(), 2u);  // attach + apply; other blocks' moves leave it alone
  // A move behind Placement's back is caught by the audit, with path and devices.
  lora->tensor() = at::zeros({4});  // on the cpu, while blocks.3 is on meta
  const auto issues = p->audit();
  ASSERT_EQ(issues.size(), 1u) << formatAudit(issues);
  EXPECT_EQ(issues[0].blockId, "blocks.3");
  EXPECT_EQ(issues[0].expected, "meta");
  EXPECT_EQ(issues[0].actual, "cpu");
  EXPECT_EQ(issues[0].path, "blocks.3.attn.to_q [lora_adapter] t");
  EXPECT_THROW(p->auditOrThrow("before step 1"), PlacementError);
  EXPECT_THROW(p->moveBlock("blocks.9", kCpu), PlacementError);
}

TEST(PlacementSeedBug3, MultiplierWorksFromAnyDevice) {
  // The network-level multiplier is a cpu tensor; it is moved where it is used.
  lora::LoraMultiplier mult;
  mult.set(at::tensor({0.5f, 2.0f}));  // cpu, [B]
  const at::Tensor onMeta = mult.apply(at::ones({2, 3, 5}).to(kMeta));
  EXPECT_EQ(onMeta.device(), kMeta);
  EXPECT_EQ(onMeta.sizes(), (std::vector<int64_t>{2, 3, 5}));
  // Through a real adapter (cpu): values are the multiplier times the plain delta.
  auto shared = std::make_shared<lora::LoraMultiplier>();
  ToyModel model(4, 8, 1);
  ToyAdapters lora = addToyAdapters(model, 2, shared);
  auto& c = lora.adapters.front();
  {
    at::NoGradGuard g;
    c->up.normal_();
  }
  const at::Tensor x = at::randn({2, 3, c->host()->inFeatures()});
  const at::Tensor plain = c->delta(x, at::Tensor());
  shared->set(at::tensor({0.5f, 2.0f}));
  const at::Tensor scaled = c->delta(x, at::Tensor());
  EXPECT_TRUE(at::allclose(scaled[0], plain[0] * 0.5));
  EXPECT_TRUE(at::allclose(scaled[1], plain[1] * 2.0));
}

TEST(PlacementSeedBug4, RelayAndBlocksShareOneIoType) {
  // Compile time: the relay's and every block's signature are the one BlockIO -> BlockIO,
  // so a wrapper cannot take a stale argument list.
  static_assert(std::is_same_v<decltype(&nn::Block::forward), nn::BlockIO (nn::Block::*)(const nn::BlockIO&)>);
  static_assert(
      std::is_same_v<decltype(&Placement::run), nn::BlockIO (Placement::*)(size_t, nn::Block&, const nn::BlockIO&)>);
  static_assert(std::is_same_v<decltype(&Placement::toHead), nn::BlockIO (Placement::*)(const nn::BlockIO&)>);
  static_assert(std::is_base_of_v<nn::BlockRunner, Placement>);

  // Run time: every field, the text tokens included, reaches the block's device.
  auto rec = std::make_shared<RecordingBlock>();
  nn::BlockList list;
  list.stem = nn::BlockSlot{"stem", "stem", {}, nullptr};
  list.blocks.push_back(nn::BlockSlot{"blocks.0", "single", {{"blocks.0", rec}}, rec});
  list.head = nn::BlockSlot{"head", "head", {}, nullptr};
  Placement p(list, {kMeta}, kCpu, kMeta);
  p.apply();
  nn::BlockIO io;
  io.img = at::randn({1, 4, 8});
  io.txt = at::randn({1, 3, 8});
  io.temb = at::randn({1, 8});
  io.ropeCos = at::randn({7, 4});
  io.ropeSin = at::randn({7, 4});
  io.mask = at::ones({1, 7}, at::kBool);
  const nn::BlockIO out = p.run(0, *rec, io);
  ASSERT_EQ(rec->seen.size(), static_cast<size_t>(nn::BlockIO::kFieldCount));
  for (const auto& d : rec->seen) EXPECT_EQ(d, "meta");
  // The output is a BlockIO too (no tuple special case); toHead moves it whole.
  const nn::BlockIO atHead = p.toHead(io);
  for (const auto& f : atHead.fields()) EXPECT_EQ(f.device(), kMeta);
  EXPECT_EQ(out.txt.device(), kMeta);
}

TEST(PlacementSeedBug5, EmaShadowsAreClonedOnTheirParametersDevice) {
  // Parameters on two devices (a meta one stands for the second card).
  at::Tensor onCpu = at::randn({4, 3}).set_requires_grad(true);
  at::Tensor onMeta = at::empty({4, 3}, at::TensorOptions().device(kMeta)).set_requires_grad(true);
  train::Ema ema({{"blocks.0.fc1.lora_A.weight", onCpu}, {"blocks.3.fc1.lora_A.weight", onMeta}},
                 train::EmaOptions{0.9, 1});
  EXPECT_EQ(ema.shadow(0).device(), kCpu);
  EXPECT_EQ(ema.shadow(1).device(), kMeta);
  EXPECT_FALSE(ema.shadow(1).requires_grad());
  // Registered with the placement, they belong to the parameters' blocks; audit clean.
  auto p = planned(emptyBlocks(4), 2);
  ema.registerWith(*p);
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  EXPECT_NO_THROW(ema.updateNow());
  // A shadow that is not where its parameter is stops the update with both devices named.
  for (const auto& a : p->attachments()) {
    if (a->hostPath().rfind("blocks.0.", 0) == 0) a->moveTo(kMeta);  // behind Placement's back
  }
  EXPECT_TRUE(anyIssueFor(p->audit(), "blocks.0.fc1.lora_A.weight [ema_shadow] shadow"));
  try {
    ema.updateNow();
    ADD_FAILURE() << "update across devices did not throw";
  } catch (const PlacementError& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.fc1.lora_A.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
  }
}

TEST(PlacementSeedBug5, EmaBuiltBeforePlacementIsMovedByRegistration) {
  // The seed's order: shadows cloned while everything is on one device, the split later.
  at::Tensor p1 = at::randn({4, 3}).set_requires_grad(true);
  at::Tensor p3 = at::randn({4, 3}).set_requires_grad(true);
  train::Ema ema({{"blocks.1.fc1.lora_A.weight", p1}, {"blocks.3.fc1.lora_A.weight", p3}}, train::EmaOptions{});
  auto p = planned(emptyBlocks(4), 2);  // blocks.3 planned on meta
  ema.registerWith(*p);
  EXPECT_EQ(ema.shadow(0).device(), kCpu);
  EXPECT_EQ(ema.shadow(1).device(), kMeta);  // moved to its block at registration
  p->moveBlock("blocks.1", kMeta);           // and with every later move of the block
  EXPECT_EQ(ema.shadow(0).device(), kMeta);
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
}

TEST(Ema, UpdateIntervalDecayAndSwap) {
  at::Tensor w = at::zeros({3}).set_requires_grad(true);
  train::Ema ema({{"w", w}}, train::EmaOptions{0.5, 2});
  {
    at::NoGradGuard g;
    w.fill_(4.0);
  }
  EXPECT_FALSE(ema.update(1));
  EXPECT_TRUE(at::allclose(ema.shadow(0), at::zeros({3})));
  EXPECT_TRUE(ema.update(2));
  EXPECT_TRUE(at::allclose(ema.shadow(0), at::full({3}, 2.0)));  // 0.5 * 0 + 0.5 * 4
  EXPECT_TRUE(ema.update(4));
  EXPECT_TRUE(at::allclose(ema.shadow(0), at::full({3}, 3.0)));
  EXPECT_EQ(ema.numUpdates(), 2);
  {
    train::Ema::SwapGuard swap(ema);
    EXPECT_TRUE(ema.swappedIn());
    EXPECT_TRUE(at::allclose(w, at::full({3}, 3.0)));
    EXPECT_THROW(ema.updateNow(), Error);
  }
  EXPECT_FALSE(ema.swappedIn());
  EXPECT_TRUE(at::allclose(w, at::full({3}, 4.0)));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_THROW(train::Ema({{"w", w}}, train::EmaOptions{1.0, 1}), ConfigError);
  EXPECT_THROW(train::Ema({{"w", w}}, train::EmaOptions{0.9, 0}), ConfigError);
}

TEST(PlacementAudit, CatchesMisplacedParametersBuffersAndAttachments) {
  ToyModel model(4, 8, 3);
  auto p = planned(model.blockList(), 2);  // blocks.2 planned on meta, its tensors still on cpu
  const auto issues = p->audit();
  // blocks.2: fc1 (weight, bias), fc2 (weight, bias), txt_proj (weight, bias), buffer scale.
  ASSERT_EQ(issues.size(), 7u) << formatAudit(issues);
  EXPECT_EQ(issues[0].path, "blocks.2.fc1.weight");
  EXPECT_EQ(issues[0].blockId, "blocks.2");
  EXPECT_EQ(issues[0].expected, "meta");
  EXPECT_EQ(issues[0].actual, "cpu");
  EXPECT_TRUE(anyIssueFor(issues, "blocks.2.scale"));
  try {
    p->auditOrThrow("before step 1");
    ADD_FAILURE();
  } catch (const PlacementError& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.2.fc1.weight: expected meta (block blocks.2), found cpu"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("before step 1"), std::string::npos);
  }
  // All cpu: clean; then one misplaced gradient and one attachment tensor are caught.
  auto cpu = Placement::singleDevice(model.blockList(), kCpu);
  cpu->apply();
  EXPECT_TRUE(cpu->audit().empty());
  auto probe = std::make_shared<ProbeAttachment>(kind("quant_scale"), "blocks.1.fc2");
  cpu->attach(probe);
  probe->tensor() = probe->tensor().to(kMeta);
  model.projOut->bias.mutable_grad() = at::zeros({4}).to(kMeta);
  const auto more = cpu->audit();
  ASSERT_EQ(more.size(), 2u) << formatAudit(more);
  EXPECT_EQ(more[0].path, "blocks.1.fc2 [quant_scale] t");
  EXPECT_EQ(more[1].path, "proj_out.bias.grad");
  EXPECT_EQ(more[1].blockId, "head");
  model.projOut->bias.mutable_grad() = at::Tensor();
}

TEST(PlacementOptimizerState, FollowsItsParameter) {
  ToyModel model(4, 8, 2);
  ToyAdapters lora = addToyAdapters(model, 2);
  std::vector<at::Tensor> params;
  for (const auto& np : lora.namedParams()) params.push_back(np.second);
  auto opt = std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
  auto states = OptimizerStateAttachment::forParameters(opt, lora.namedParams());
  EXPECT_TRUE(states.front()->tensors().empty());  // no state before the first step
  auto local = Placement::singleDevice(model.blockList(), kCpu);
  model.forward(at::randn({2, 3, 4}), at::randn({2, 2, 8}), at::randn({2, 8}), *local).sum().backward();
  opt->step();
  ASSERT_EQ(states.front()->tensors().size(), 2u);  // exp_avg, exp_avg_sq
  // The state of blocks.1's parameters follows the block's device (meta stands for a card).
  auto p = planned(model.blockList(), 1);
  p->attachAll(states);
  for (const auto& s : states) {
    const c10::Device expected = p->deviceOf(s->hostPath());
    for (const auto& t : s->tensors()) EXPECT_EQ(t.second.device(), expected) << s->hostPath() << " " << t.first;
  }
  EXPECT_FALSE(anyIssueFor(p->audit(), "[optimizer_state]"));
  size_t withGrad = 0;  // blocks.1.txt_proj does not reach the loss: no grad, no state
  for (const auto& t : params) withGrad += t.grad().defined();
  EXPECT_EQ(opt->state().size(), withGrad);
  EXPECT_EQ(withGrad, params.size() - 2);
}

TEST(PlacementSnapshot, CountsPerDevice) {
  ToyModel model(4, 8, 4);
  ToyAdapters lora = addToyAdapters(model, 2);
  auto p = planned(model.blockList(), 2);
  p->attachAll(std::vector<std::shared_ptr<Attachment>>(lora.attachments.begin(), lora.attachments.begin() + 6));
  // ToyAdapters of blocks.2/3 stay on the cpu (their hosts cannot move to meta on this
  // machine); probes of the same size stand for them on the meta device.
  for (size_t i = 6; i < lora.adapters.size(); ++i) {
    const auto& a = lora.adapters[i];
    p->attach(std::make_shared<ProbeAttachment>(kind("lora_adapter"), a->hostPath(), a->down.numel() + a->up.numel()));
  }
  train::Ema ema(lora.namedParams(), train::EmaOptions{});
  ema.registerWith(*p);
  const PlacementSnapshot snap = p->snapshot();
  ASSERT_EQ(snap.devices.size(), 2u);
  const auto& cpu = snap.devices[0];
  const auto& meta = snap.devices[1];
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_EQ(meta.device, "meta");
  ASSERT_EQ(cpu.blocks.size(), 4u);  // stem, blocks.0, blocks.1, head
  EXPECT_EQ(cpu.blocks[0].id, "stem");
  EXPECT_EQ(cpu.blocks[1].id, "blocks.0");
  EXPECT_EQ(cpu.blocks[3].id, "head");
  ASSERT_EQ(meta.blocks.size(), 2u);
  EXPECT_EQ(meta.blocks[0].kind, "layer");
  EXPECT_EQ(cpu.attachments.count("lora_adapter"), 6);
  EXPECT_EQ(meta.attachments.count("lora_adapter"), 6);
  EXPECT_EQ(meta.attachments.count("ema_shadow"), 12);  // one per parameter: down and up
  // fc1 8->16, fc2 16->8, txt 8->8 at rank 2, float32
  const int64_t loraBytesPerBlock = 4 * 2 * ((8 + 16) + (16 + 8) + (8 + 8));
  EXPECT_EQ(cpu.attachments.bytes("lora_adapter"), 2 * loraBytesPerBlock);
  EXPECT_EQ(meta.attachments.bytes("lora_adapter"), 2 * loraBytesPerBlock);
  EXPECT_EQ(meta.attachments.bytes("ema_shadow"), 2 * loraBytesPerBlock);
  EXPECT_EQ(meta.attachments.count("quant_scale"), 0);
  const int64_t blockBytes = 4 * ((8 * 16 + 16) + (16 * 8 + 8) + (8 * 8 + 8) + 8);
  EXPECT_EQ(meta.weightBytes, 2 * blockBytes);
  EXPECT_EQ(cpu.weightBytes, 2 * blockBytes + 4 * (4 * 8 + 8) + 4 * (8 * 4 + 4));
  EXPECT_GT(cpu.memory.totalBytes, 0);
  EXPECT_FALSE(meta.memory.known);
}

TEST(PlacementSnapshot, PerBlockFiguresEqualTheTensorsBytes) {
  ToyModel model(4, 8, 3);
  ToyAdapters lora = addToyAdapters(model, 2);
  auto p = Placement::singleDevice(model.blockList(), kCpu);
  p->apply();
  p->attachAll(lora.attachments);
  std::vector<at::Tensor> params;
  for (const auto& np : lora.namedParams()) params.push_back(np.second);
  auto opt = std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
  model.forward(at::randn({2, 3, 4}), at::randn({2, 2, 8}), at::randn({2, 8}), *p).sum().backward();
  opt->step();
  p->attachAll(OptimizerStateAttachment::forParameters(opt, lora.namedParams()));
  train::Ema ema(lora.namedParams(), train::EmaOptions{});
  ema.registerWith(*p);
  // A kind placement has never heard of, registered by name only (what quantization will do).
  p->attach(std::make_shared<ProbeAttachment>(kind("quant_scale"), "blocks.1.fc2", 5));

  // Expected: walk the live tensors independently of the snapshot.
  auto bytesOf = [](const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : int64_t{0}; };
  std::map<std::string, int64_t> weights;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> attached;  // (block, kind) -> count, bytes
  const auto list = model.blockList();
  std::vector<const nn::BlockSlot*> slots{&list.stem};
  for (const auto& b : list.blocks) slots.push_back(&b);
  slots.push_back(&list.head);
  for (const auto* slot : slots)
    for (const auto& nm : slot->modules) {
      for (const auto& t : nm.module->parameters(true)) weights[slot->id] += bytesOf(t);
      for (const auto& t : nm.module->buffers(true)) weights[slot->id] += bytesOf(t);
    }
  for (const auto& a : p->attachments()) {
    auto& figures = attached[{p->ownerOf(a->hostPath()), a->kind().name()}];
    figures.first++;
    for (const auto& nt : a->tensors()) figures.second += bytesOf(nt.second);
  }

  const auto snap = p->snapshot();
  ASSERT_EQ(snap.devices.size(), 1u);
  const auto& d = snap.devices[0];
  ASSERT_EQ(d.blocks.size(), slots.size());
  int64_t weightSum = 0, attachedSum = 0;
  for (const auto& b : d.blocks) {
    EXPECT_EQ(b.weightBytes, weights[b.id]) << b.id;
    weightSum += b.weightBytes;
    attachedSum += b.attachments.totalBytes();
    for (const auto& k : b.attachments.kinds) {
      const auto it = attached.find({b.id, k.kind});
      ASSERT_NE(it, attached.end()) << b.id << " " << k.kind;
      EXPECT_EQ(k.count, it->second.first) << b.id << " " << k.kind;
      EXPECT_EQ(k.bytes, it->second.second) << b.id << " " << k.kind;
    }
  }
  size_t kindsSeen = 0;
  for (const auto& b : d.blocks) kindsSeen += b.attachments.kinds.size();
  EXPECT_EQ(kindsSeen, attached.size()) << "every (block, kind) with an attachment is reported";
  EXPECT_EQ(d.weightBytes, weightSum);
  EXPECT_EQ(d.attachments.totalBytes(), attachedSum);
  // The per-kind figures of one block, spelled out: blocks.1 has LoRA, EMA, AdamW state and the scale probe.
  const auto& b1 = d.blocks[2];
  ASSERT_EQ(b1.id, "blocks.1");
  const int64_t lora1 = 4 * 2 * ((8 + 16) + (16 + 8) + (8 + 8));  // fc1, fc2, txt_proj at rank 2, float32
  EXPECT_EQ(b1.attachments.bytes("lora_adapter"), lora1);
  EXPECT_EQ(b1.attachments.bytes("ema_shadow"), lora1);
  EXPECT_EQ(b1.attachments.count("optimizer_state"), 6);
  EXPECT_EQ(b1.attachments.bytes("quant_scale"), 5 * 4);
  EXPECT_GT(b1.attachments.bytes("optimizer_state"), 0);
}

TEST(AttachmentKind, OpenSetByName) {
  const auto a = AttachmentKind::registered("test_feature_kind");
  EXPECT_EQ(a, AttachmentKind::registered("test_feature_kind"));
  EXPECT_NE(a, AttachmentKind::registered("test_other_kind"));
  EXPECT_EQ(a.name(), "test_feature_kind");
  bool listed = false;
  for (const auto& k : AttachmentKind::all()) listed = listed || k == a;
  EXPECT_TRUE(listed);
  EXPECT_THROW(AttachmentKind::registered(""), PlacementError);
  EXPECT_THROW(AttachmentKind::registered("Has Space"), PlacementError);
}

TEST(PlacementEquality, SplitOutputAndLoraGradsEqualOneDeviceOnCpu) {
  // Logic only (every "device" is the cpu here): the relay and the attachment
  // bookkeeping change nothing numerically. The two-GPU version is in tests/gpu.
  torch::manual_seed(3);
  ToyModel a(4, 16, 6), b(4, 16, 6);
  test::copyWeights(a, b);
  ToyAdapters la = addToyAdapters(a, 4), lb = addToyAdapters(b, 4);
  for (size_t i = 0; i < la.adapters.size(); ++i) {
    at::NoGradGuard g;
    la.adapters[i]->up.normal_(0, 0.1);
    lb.adapters[i]->setWeights(la.adapters[i]->down, la.adapters[i]->up);
  }
  nn::LocalRunner local;
  std::vector<c10::Device> devs(6, kCpu);
  Placement split(b.blockList(), devs, kCpu, kCpu);
  split.attachAll(lb.attachments);
  split.apply();
  const at::Tensor x = at::randn({2, 5, 4}), txt = at::randn({2, 3, 16}), temb = at::randn({2, 16});
  const at::Tensor ya = a.forward(x, txt, temb, local);
  const at::Tensor yb = b.forward(x, txt, temb, split);
  EXPECT_TRUE(at::equal(ya, yb));
  ya.pow(2).mean().backward();
  yb.pow(2).mean().backward();
  size_t compared = 0;
  for (size_t i = 0; i < la.adapters.size(); ++i) {
    // The last block's text projection does not reach the output: no gradient in either.
    ASSERT_EQ(la.adapters[i]->down.grad().defined(), lb.adapters[i]->down.grad().defined());
    if (!la.adapters[i]->down.grad().defined()) continue;
    ++compared;
    EXPECT_TRUE(at::equal(la.adapters[i]->down.grad(), lb.adapters[i]->down.grad())) << la.adapters[i]->hostPath();
    EXPECT_TRUE(at::equal(la.adapters[i]->up.grad(), lb.adapters[i]->up.grad())) << la.adapters[i]->hostPath();
  }
  EXPECT_EQ(compared, la.adapters.size() - 1);
}
