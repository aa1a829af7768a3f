// GPU check of q, k, v as one GEMM each way (nn::shareWeightRows / nn::forwardSiblings;
// docs/speed.md, s37; label gpu, skips without CUDA): one FLUX.1-dev double block at
// 1024 px (4096 image + 512 text tokens, bf16, a LoRA on its Linears), built twice from
// one seed, one with each stream's q, k, v weights in one tensor. It prints the step
// time (forward + backward of the block, median of the rounds, the two alternating), what
// the forward keeps for the backward, and checks that sharing the rows allocated nothing
// and that the output, the input gradients and the LoRA gradients agree. No speed is asserted.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <vector>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Linear.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

namespace {

// FLUX.1-dev width; the double block is the one timed (the single block only completes the model).
FluxConfig oneDoubleBlock() {
  auto cfg = FluxConfig::fluxDev();
  cfg.numLayers = 1;
  cfg.numSingleLayers = 1;
  return cfg;
}

struct Side {
  std::unique_ptr<FluxTransformer> model;
  std::shared_ptr<lora::LoraNetwork> net;
};

Side build(const FluxConfig& cfg) {
  Side s;
  at::manual_seed(7);
  FluxBuildOptions o;
  o.device = at::Device(at::kCUDA, 0);
  o.dtype = at::kBFloat16;
  s.model = std::make_unique<FluxTransformer>(cfg, o);
  for (auto& p : s.model->parameters()) p.requires_grad_(false);
  at::manual_seed(9);
  lora::LoraConfig lc;
  lc.rank = 16;
  lc.alpha = 16;
  lc.targetModules = {"to_q",       "to_k",       "to_v",       "to_out.0",      "add_q_proj",
                      "add_k_proj", "add_v_proj", "to_add_out", "ff.net.0.proj", "ff.net.2"};
  s.net = lora::LoraNetwork::create(*s.model, lc, FluxLoraRules(cfg));
  at::NoGradGuard g;
  for (const auto& a : s.net->adapters()) a->up.normal_(0, 0.01);  // non-zero ups: every gradient is non-zero
  return s;
}

struct Pass {
  double loss = 0;
  int64_t keptBytes = 0;       // allocated after the forward minus before: what the backward keeps
  std::vector<double> stepMs;  // forward + backward of the block, per round
  at::Tensor out;              // the block's image and text outputs, flattened, float32
  at::Tensor grads;            // the block inputs' and every LoRA gradient, flattened, float32
  size_t gradCount = 0;        // how many tensors went into grads
};

// One forward + backward of the double block on `in` (its img and txt made leaves that need
// a gradient, as a block's inputs do after the first), a fixed random projection as the loss.
void step(Side& s, const nn::BlockIO& in0, const at::Tensor& gImg, const at::Tensor& gTxt, Pass& p, bool measure) {
  for (const auto& a : s.net->adapters()) {
    a->down.mutable_grad() = at::Tensor();
    a->up.mutable_grad() = at::Tensor();
  }
  nn::BlockIO in = in0;
  in.img = in0.img.detach().clone().requires_grad_(true);
  in.txt = in0.txt.detach().clone().requires_grad_(true);
  synchronize();
  const int64_t before = currentAllocatedBytes();
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = s.model->block(0)->forward(in);
  const auto loss = (out.img.to(at::kFloat) * gImg).sum() + (out.txt.to(at::kFloat) * gTxt).sum();
  synchronize();
  const int64_t kept = currentAllocatedBytes() - before;
  loss.backward();
  synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!measure) return;
  p.stepMs.push_back(ms);
  p.keptBytes = kept;
  p.loss = loss.item<double>();
  p.out = at::cat({out.img.detach().flatten(), out.txt.detach().flatten()}).to(at::kFloat);
  std::vector<at::Tensor> g{in.img.grad().flatten().to(at::kFloat), in.txt.grad().flatten().to(at::kFloat)};
  for (const auto& a : s.net->adapters()) {
    if (!a->down.grad().defined()) continue;  // the single block's adapters: only block 0 runs
    g.push_back(a->down.grad().flatten().to(at::kFloat));
    g.push_back(a->up.grad().flatten().to(at::kFloat));
  }
  p.gradCount = g.size();
  p.grads = at::cat(g);
}

}  // namespace

TEST(SharedRowsGpu, FluxDevDoubleBlockQkvAsOneGemmAt1024) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  compat::setCudnnAttention(false);  // flash, as test_fused_gpu
  nn::setFusedPaths(true);
  const auto cfg = oneDoubleBlock();
  Side separate = build(cfg);
  Side shared = build(cfg);
  synchronize();
  const int64_t beforeSharing = currentAllocatedBytes();
  ASSERT_EQ(nn::shareSiblingWeightRows(shared.model->blockList()), 2);
  synchronize();
  EXPECT_EQ(currentAllocatedBytes(), beforeSharing) << "sharing the rows kept a copy";
  auto* block = dynamic_cast<FluxDoubleBlock*>(shared.model->block(0).get());
  ASSERT_NE(block, nullptr);
  ASSERT_TRUE(nn::sharesWeightRows(block->attn.imgQkv.linears()));

  const at::Device cuda(at::kCUDA, 0);
  const auto bf16 = at::TensorOptions(cuda).dtype(at::kBFloat16);
  const int64_t side = 64, textTokens = 512;  // 1024 px: 64 x 64 latent patches
  at::manual_seed(8);
  FluxInputs in;
  in.img = at::randn({1, side * side, cfg.inChannels}, bf16);
  in.txt = at::randn({1, textTokens, cfg.jointAttentionDim}, bf16);
  in.pooled = at::randn({1, cfg.pooledProjectionDim}, bf16);
  in.timestep = at::full({1}, 0.5, at::TensorOptions(cuda));
  in.guidance = at::ones({1}, at::TensorOptions(cuda));
  in.imgIds = imageIds(2 * side, 2 * side, at::TensorOptions(cuda));
  in.txtIds = textIds(textTokens, at::TensorOptions(cuda));
  nn::BlockIO io;
  {
    at::NoGradGuard g;
    io = separate.model->stem(in);
  }
  at::manual_seed(10);
  const auto gImg = at::randn({1, side * side, cfg.hiddenSize()}, at::TensorOptions(cuda)) * 1e-3;
  const auto gTxt = at::randn({1, textTokens, cfg.hiddenSize()}, at::TensorOptions(cuda)) * 1e-3;

  Pass a, b;                                 // separate, shared
  step(separate, io, gImg, gTxt, a, false);  // warm-up
  step(shared, io, gImg, gTxt, b, false);
  const int rounds = 10;
  for (int i = 0; i < rounds; ++i) {
    step(separate, io, gImg, gTxt, a, true);
    step(shared, io, gImg, gTxt, b, true);
  }
  const double relGrads = relL2(b.grads, a.grads);
  std::cout << "[shared rows gpu] FLUX.1-dev double block, 1024 px, bf16, LoRA rank 16: fwd+bwd median of " << rounds
            << ": " << medianMs(a.stepMs) << " ms three GEMMs, " << medianMs(b.stepMs)
            << " ms q/k/v as one GEMM; kept for the backward " << a.keptBytes / 1e6 << " MB / " << b.keptBytes / 1e6
            << " MB; outputs rel L2 " << relL2(b.out, a.out) << "; loss " << a.loss << " / " << b.loss
            << "; input and LoRA gradients rel L2 " << relGrads << std::endl;
  EXPECT_LT(relL2(b.out, a.out), 1e-2);
  EXPECT_LT(relGrads, 3e-2);  // bf16 rounding of one GEMM against three and their sum
  EXPECT_GT(a.grads.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(a.gradCount, b.gradCount);
  EXPECT_EQ(a.gradCount, 2u + 2u * 10u);  // the two inputs, then down and up of the double block's 10 adapters
  separate = {};
  shared = {};
  train::releaseDeviceCaches();
}
