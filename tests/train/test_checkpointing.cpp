// Activation checkpointing: gradients with and without it are equal.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "nn/Block.h"
#include "nn/Linear.h"
#include "train/CheckpointedRunner.h"
#include "common/TestSupport.h"

using namespace strata;

namespace {

// A trainable delta that is not a child of its host (like LoRA).
struct ToyAdapter final : nn::LinearAdapter {
  at::Tensor down, up;
  ToyAdapter(int64_t in, int64_t out) {
    down = (at::randn({2, in}) * 0.3).requires_grad_(true);
    up = (at::randn({out, 2}) * 0.3).requires_grad_(true);
  }
  at::Tensor delta(const at::Tensor& x, const at::Tensor&) override { return at::linear(at::linear(x, down), up); }
};

// Uses img, txt and temb; passes rope through unchanged; optional dropout.
struct ToyBlock final : nn::Block {
  nn::Linear a{nullptr}, b{nullptr};
  double dropout;
  ToyBlock(int64_t dim, double p) : dropout(p) {
    a = register_module("a", nn::Linear(dim, dim));
    b = register_module("b", nn::Linear(dim, dim));
  }
  nn::BlockIO forward(const nn::BlockIO& in) override {
    nn::BlockIO out = in;
    auto h = at::gelu(a->forward(in.img) + in.temb.unsqueeze(1));
    if (dropout > 0) h = at::dropout(h, dropout, /*train=*/true);
    out.img = in.img + b->forward(h);
    out.txt = in.txt + at::tanh(a->forward(in.txt));
    return out;
  }
};

struct CountingRunner final : nn::BlockRunner {
  int calls = 0;
  nn::BlockIO run(size_t, nn::Block& block, const nn::BlockIO& in) override {
    ++calls;
    return block.forward(in);
  }
};

struct Toy {
  std::vector<std::shared_ptr<ToyBlock>> blocks;
  std::vector<std::shared_ptr<ToyAdapter>> adapters;
  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out;
    for (auto& ad : adapters) {
      out.push_back(ad->down);
      out.push_back(ad->up);
    }
    return out;
  }
};

Toy makeToy(int n, int64_t dim, double dropout) {
  Toy t;
  for (int i = 0; i < n; ++i) {
    auto b = std::make_shared<ToyBlock>(dim, dropout);
    for (auto& p : b->parameters()) p.requires_grad_(false);  // frozen base
    auto ad = std::make_shared<ToyAdapter>(dim, dim);
    b->a->addAdapter(ad);
    t.blocks.push_back(b);
    t.adapters.push_back(ad);
  }
  return t;
}

at::Tensor lossOf(Toy& toy, nn::BlockRunner& runner, const nn::BlockIO& input) {
  nn::BlockIO io = input;
  for (size_t i = 0; i < toy.blocks.size(); ++i) io = runner.run(i, *toy.blocks[i], io);
  io = runner.toHead(io);
  return (io.img.pow(2).mean() + io.txt.pow(3).mean());
}

std::vector<at::Tensor> gradsOf(Toy& toy, nn::BlockRunner& runner, const nn::BlockIO& input, uint64_t seed) {
  for (auto& p : toy.params()) p.mutable_grad() = at::Tensor();
  at::manual_seed(seed);
  lossOf(toy, runner, input).backward();
  std::vector<at::Tensor> g;
  for (auto& p : toy.params()) g.push_back(p.grad().clone());
  return g;
}

nn::BlockIO toyInput(int64_t dim, bool inputRequiresGrad) {
  nn::BlockIO in;
  in.img = at::randn({2, 5, dim});
  in.txt = at::randn({2, 3, dim});
  in.temb = at::randn({2, dim});
  in.ropeCos = at::randn({8, 4});
  in.ropeSin = at::randn({8, 4});
  if (inputRequiresGrad) in.img.requires_grad_(true);
  return in;
}

}  // namespace

TEST(CheckpointedRunner, SameAdapterGradientsAsPlainRun) {
  at::manual_seed(0);
  auto toy = makeToy(4, 8, 0.0);
  auto in = toyInput(8, false);
  CountingRunner plain;
  const auto expected = gradsOf(toy, plain, in, 1);
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner);
  const auto actual = gradsOf(toy, ckpt, in, 1);
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(test::allClose(actual[i], expected[i], 1e-6, 1e-5)) << "param " << i;
  // Each block ran once forward and once more in backward.
  EXPECT_EQ(inner.calls, 8);
  EXPECT_EQ(ckpt.recomputeCount(), 4);
  // A real check: the gradients are not all zero.
  EXPECT_GT(expected[1].abs().sum().item<double>(), 0.0);
}

TEST(CheckpointedRunner, InputGradientsFlowThrough) {
  at::manual_seed(0);
  auto toy = makeToy(3, 6, 0.0);
  auto in = toyInput(6, true);
  CountingRunner plain;
  in.img.mutable_grad() = at::Tensor();
  lossOf(toy, plain, in).backward();
  const auto expected = in.img.grad().clone();
  in.img.mutable_grad() = at::Tensor();
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner);
  lossOf(toy, ckpt, in).backward();
  EXPECT_TRUE(test::allClose(in.img.grad(), expected, 1e-6, 1e-5));
}

TEST(CheckpointedRunner, DropoutMasksAreReplayedInBackward) {
  at::manual_seed(0);
  auto toy = makeToy(3, 8, 0.3);
  auto in = toyInput(8, false);
  CountingRunner plain;
  const auto expected = gradsOf(toy, plain, in, 11);
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner);
  const auto actual = gradsOf(toy, ckpt, in, 11);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(test::allClose(actual[i], expected[i], 1e-6, 1e-5)) << "param " << i;
}

// Where nothing in the blocks draws (no LoRA dropout), the runner neither saves nor
// restores the random state (a CUDA graph could not record that): the gradients are
// the plain run's. Told so while a block does draw, the recompute draws masks of its
// own: the gradients differ, and the generator moves on by the recompute's draws.
TEST(CheckpointedRunner, LeavesTheRandomStateAloneWhereNothingDraws) {
  at::manual_seed(0);
  auto quiet = makeToy(3, 8, 0.0);
  auto in = toyInput(8, false);
  CountingRunner plain;
  const auto expected = gradsOf(quiet, plain, in, 5);
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner, /*offloadInputs=*/false, /*blocksDrawRandom=*/false);
  const auto actual = gradsOf(quiet, ckpt, in, 5);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(actual[i].equal(expected[i])) << "param " << i;
  EXPECT_EQ(ckpt.recomputeCount(), 3);

  auto drawing = makeToy(3, 8, 0.3);
  auto stateAfter = [&](nn::BlockRunner& runner, std::vector<at::Tensor>& grads) {
    grads = gradsOf(drawing, runner, in, 7);
    return at::rand({4});  // the generator's next numbers after forward and backward
  };
  std::vector<at::Tensor> plainGrads, restoredGrads, freshGrads;
  CountingRunner a, b, c;
  const auto afterPlain = stateAfter(a, plainGrads);
  train::CheckpointedRunner restoring(b);
  const auto afterRestored = stateAfter(restoring, restoredGrads);
  train::CheckpointedRunner notRestoring(c, false, /*blocksDrawRandom=*/false);
  const auto afterFresh = stateAfter(notRestoring, freshGrads);
  EXPECT_TRUE(afterRestored.equal(afterPlain)) << "the recompute's draws are put back";
  EXPECT_FALSE(afterFresh.equal(afterPlain)) << "the recompute drew on from the forward's state";
  bool differ = false;
  for (size_t i = 0; i < plainGrads.size(); ++i) {
    EXPECT_TRUE(test::allClose(restoredGrads[i], plainGrads[i], 1e-6, 1e-5)) << "param " << i;
    differ = differ || !test::allClose(freshGrads[i], plainGrads[i], 1e-6, 1e-5);
  }
  EXPECT_TRUE(differ) << "other dropout masks in the recompute";
}

TEST(CheckpointedRunner, NoGradRunsPlainly) {
  at::manual_seed(0);
  auto toy = makeToy(2, 4, 0.0);
  auto in = toyInput(4, false);
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner);
  at::NoGradGuard noGrad;
  auto loss = lossOf(toy, ckpt, in);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_EQ(inner.calls, 2);
}

TEST(CheckpointedRunner, OffloadLeavesCpuInputsWhereTheyAreAndGradientsEqual) {
  // train.offload_checkpoints copies CUDA block inputs to host memory; CPU inputs
  // stay as they are (tests/gpu/test_checkpoint_offload_gpu.cpp checks the CUDA case).
  at::manual_seed(0);
  auto toy = makeToy(3, 8, 0.0);
  auto in = toyInput(8, true);
  CountingRunner plain;
  const auto expected = gradsOf(toy, plain, in, 1);
  CountingRunner inner;
  train::CheckpointedRunner ckpt(inner, /*offloadInputs=*/true);
  const auto actual = gradsOf(toy, ckpt, in, 1);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(test::allClose(actual[i], expected[i], 1e-6, 1e-5)) << "param " << i;
  EXPECT_EQ(ckpt.offloadCount(), 0);
  EXPECT_EQ(ckpt.recomputeCount(), 3);
}
