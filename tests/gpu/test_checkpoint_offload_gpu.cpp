// train.offload_checkpoints on CUDA: the checkpointed block inputs go to pinned host
// memory and come back for the recompute. The LoRA-like gradients equal those of a
// plain checkpointed run, and the device holds less between forward and backward.
#include <gtest/gtest.h>

#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "nn/Block.h"
#include "nn/Linear.h"
#include "train/CheckpointedRunner.h"

using namespace strata;
using namespace strata::test::gpu;

namespace {

struct Delta final : nn::LinearAdapter {
  at::Tensor down, up;
  Delta(int64_t dim, const at::TensorOptions& o) {
    down = (at::randn({4, dim}, o) * 0.1).requires_grad_(true);
    up = (at::randn({dim, 4}, o) * 0.1).requires_grad_(true);
  }
  at::Tensor delta(const at::Tensor& x, const at::Tensor&) override { return at::linear(at::linear(x, down), up); }
};

struct Block final : nn::Block {
  nn::Linear a{nullptr};
  Block(int64_t dim, const at::TensorOptions& o) { a = register_module("a", nn::Linear(dim, dim, true, o)); }
  nn::BlockIO forward(const nn::BlockIO& in) override {
    nn::BlockIO out = in;
    out.img = in.img + at::gelu(a->forward(in.img) + in.temb.unsqueeze(1));
    out.txt = in.txt + at::tanh(a->forward(in.txt));
    return out;
  }
};

struct Plain final : nn::BlockRunner {
  nn::BlockIO run(size_t, nn::Block& block, const nn::BlockIO& in) override { return block.forward(in); }
};

}  // namespace

TEST(CheckpointOffloadGpu, SameGradientsAndLessHeldOnTheDevice) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto o = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);
  at::manual_seed(3);
  const int64_t dim = 256, blocks = 6;
  std::vector<std::shared_ptr<Block>> bs;
  std::vector<std::shared_ptr<Delta>> ds;
  for (int64_t i = 0; i < blocks; ++i) {
    bs.push_back(std::make_shared<Block>(dim, o));
    for (auto& p : bs.back()->parameters()) p.requires_grad_(false);
    ds.push_back(std::make_shared<Delta>(dim, o));
    bs.back()->a->addAdapter(ds.back());
  }
  nn::BlockIO in;
  in.img = at::randn({2, 4096, dim}, o);  // 8 MB per block input
  in.txt = at::randn({2, 512, dim}, o);
  in.temb = at::randn({2, dim}, o);
  auto run = [&](bool offload, int64_t& heldAfterForward, int64_t& offloads) {
    for (auto& d : ds) d->down.mutable_grad() = d->up.mutable_grad() = at::Tensor();
    Plain inner;
    train::CheckpointedRunner ckpt(inner, offload);
    synchronize();
    const int64_t before = currentAllocatedBytes();
    nn::BlockIO io = in;
    for (int64_t i = 0; i < blocks; ++i) io = ckpt.run(static_cast<size_t>(i), *bs[static_cast<size_t>(i)], io);
    auto loss = io.img.pow(2).mean() + io.txt.pow(2).mean();
    synchronize();
    heldAfterForward = currentAllocatedBytes() - before;
    loss.backward();
    offloads = ckpt.offloadCount();
    std::vector<at::Tensor> g;
    for (auto& d : ds) g.push_back(d->down.grad().detach().cpu());
    return g;
  };
  int64_t heldPlain = 0, heldOff = 0, offPlain = 0, offOn = 0;
  const auto ref = run(false, heldPlain, offPlain);
  const auto got = run(true, heldOff, offOn);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, relL2(got[i], ref[i]));
  std::cout << "[offload gpu] " << blocks << " blocks: held after forward " << heldPlain / 1e6 << " MB -> "
            << heldOff / 1e6 << " MB with offload; " << offOn << " inputs offloaded; gradients relative L2 " << worst
            << std::endl;
  EXPECT_EQ(offPlain, 0);
  EXPECT_EQ(offOn, 2 * blocks);
  EXPECT_LT(worst, 1e-6);
  // The last two blocks' inputs stay on the card until the backward waits for their host
  // copies (CheckpointedRunner::releaseCopied); the four before them are gone.
  EXPECT_LT(heldOff, heldPlain - (blocks - 3) * 8'000'000);
}
