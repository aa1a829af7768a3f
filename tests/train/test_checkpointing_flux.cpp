// Activation checkpointing on the tiny FLUX model with a LoRA network: the
// LoRA gradients equal those of a plain run, through the placement relay.
#include <gtest/gtest.h>

#include "lora/LoraNetwork.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "placement/Placement.h"
#include "common/TestSupport.h"
#include "train/CheckpointedRunner.h"

using namespace strata;

TEST(CheckpointedRunner, TinyFluxLoraGradientsMatch) {
  at::manual_seed(3);
  const auto cfg = flux::FluxConfig::tiny();
  auto model = std::make_shared<flux::FluxTransformer>(cfg);
  for (auto& p : model->parameters()) p.requires_grad_(false);
  lora::LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 4;
  auto net = lora::LoraNetwork::create(*model, lc, flux::FluxLoraRules(cfg));
  {
    // Non-zero ups so every adapter contributes to the output and its gradients.
    at::NoGradGuard ng;
    for (auto& a : net->adapters()) a->up.normal_(0, 0.02);
  }
  auto placement = placement::Placement::singleDevice(model->blockList(), at::kCPU);
  placement->attachAll(net->attachments());
  placement->apply();

  flux::FluxInputs in;
  const int64_t h = 8, w = 8;
  in.img = flux::packLatents(at::randn({2, cfg.latentChannels(), h, w}));
  in.txt = at::randn({2, 5, cfg.jointAttentionDim});
  in.pooled = at::randn({2, cfg.pooledProjectionDim});
  in.timestep = at::tensor({0.3f, 0.8f});
  in.guidance = at::ones({2});
  in.imgIds = flux::imageIds(h, w);
  in.txtIds = flux::textIds(5);
  const auto target = at::randn_like(in.img);

  auto grads = [&](nn::BlockRunner* runner) {
    for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
    at::mse_loss(model->forward(in, runner), target).backward();
    std::vector<at::Tensor> g;
    for (auto& p : net->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return g;
  };
  const auto plain = grads(placement.get());
  train::CheckpointedRunner ckpt(*placement);
  const auto checkpointed = grads(&ckpt);
  EXPECT_EQ(ckpt.recomputeCount(), static_cast<int64_t>(model->blockCount()));
  ASSERT_EQ(plain.size(), checkpointed.size());
  double total = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(test::allClose(checkpointed[i], plain[i], 1e-6, 1e-4)) << "parameter " << i;
    total += plain[i].abs().sum().item<double>();
  }
  EXPECT_GT(total, 0.0);
}
