// Quantization scales are attachments of their block: Placement registers and
// moves them, and the audit reports one left on another device.
#include <gtest/gtest.h>

#include "nn/Quantize.h"
#include "placement/Placement.h"
#include "placement/QuantScaleAttachment.h"
#include "ToyModel.h"

using namespace strata;
using namespace strata::placement;
using strata::test::ToyModel;

namespace {

const c10::Device kCpu(c10::kCPU);
const c10::Device kMeta(c10::kMeta);

}  // namespace

TEST(QuantScale, OneAttachmentPerQuantizedLinearAuditCatchesAStrayScale) {
  auto model = std::make_shared<ToyModel>(8, 16, 3);
  int64_t n = 0;
  for (auto& b : model->blocks) n += nn::quantizeLinears(*b, nn::QuantType::Int8);
  EXPECT_EQ(n, 9);  // fc1, fc2, txt_proj per block; stem and head stay float
  auto p = Placement::singleDevice(model->blockList(), kCpu);
  const auto scales = QuantScaleAttachment::forModel(*model);
  ASSERT_EQ(scales.size(), 9u);
  p->attachAll(scales);
  p->apply();
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  EXPECT_EQ(scales[0]->kind().name(), "quant_scale");
  // The snapshot counts the scales with their block.
  bool counted = false;
  for (const auto& d : p->snapshot().devices)
    for (const auto& b : d.blocks)
      for (const auto& k : b.attachments.kinds)
        if (k.kind == "quant_scale" && b.id == "blocks.1") {
          counted = true;
          EXPECT_EQ(k.count, 3);
          EXPECT_EQ(k.bytes, (32 + 16 + 16) * 4);  // one float32 per output row
        }
  EXPECT_TRUE(counted);
  // A scale moved behind Placement's back is caught, with its path and devices.
  model->blocks[1]->fc2->weightScale = model->blocks[1]->fc2->weightScale.to(kMeta);
  const auto issues = p->audit();
  ASSERT_EQ(issues.size(), 1u) << formatAudit(issues);
  EXPECT_EQ(issues[0].blockId, "blocks.1");
  EXPECT_EQ(issues[0].path, "blocks.1.fc2 [quant_scale] weight_scale");
  EXPECT_EQ(issues[0].expected, "cpu");
  EXPECT_EQ(issues[0].actual, "meta");
}

TEST(QuantScale, ScalesFollowTheirBlocksMoves) {
  // Blocks without parameters (a module with parameters cannot go to meta on
  // LibTorch 1.13); the quantized Linear stands outside them, owned by blocks.2 by path.
  auto p = std::make_unique<Placement>(test::emptyBlocks(3), std::vector<c10::Device>{kCpu, kCpu, kCpu}, kCpu, kCpu);
  nn::Linear lin(8, 4);
  lin->quantize(nn::QuantType::Int8);
  p->attach(std::make_shared<QuantScaleAttachment>("blocks.2.fc", lin.ptr()));
  p->apply();
  EXPECT_EQ(lin->weightScale.device(), kCpu);
  const auto before = lin->weightScale.clone();
  // cpu -> meta only: a meta tensor has no data to copy back.
  p->moveBlock("blocks.2", kMeta);
  EXPECT_EQ(lin->weightScale.device(), kMeta);
  EXPECT_EQ(lin->weightScale.sizes(), before.sizes());
  EXPECT_TRUE(p->audit().empty()) << formatAudit(p->audit());
  p->moveBlock("blocks.1", kMeta);  // another block's move leaves it alone
  EXPECT_EQ(lin->weightScale.device(), kMeta);
}
