// GPU checks of the Llama-family causal LM (label gpu; they skip without CUDA):
// the causal_lm fixtures on CUDA in float32 (logits where the mask is 1, loss,
// the peft adapter's logits, loss, gradients and one AdamW step); a tiny model
// split over two GPUs equals one GPU; and an 8B-shaped Llama with random bf16
// weights, LoRA r 8 on the seven projections, 2 x 512 tokens: forward, backward
// and AdamW step time and peak memory, without and with activation
// checkpointing, and the memory back to zero afterwards.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "models/llama/LlamaForCausalLM.h"
#include "models/llama/LlamaModuleNames.h"
#include "parity/CausalLmFixture.h"
#include "placement/Placement.h"
#include "train/CheckpointedRunner.h"
#include "train/TrainerSupport.h"
#include "gpu/GpuStats.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::test::gpu;

TEST(LlamaGpu, CausalLmFixturesOnCudaFloat32) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("causal_lm");
  ASSERT_FALSE(fixtures.empty()) << "no causal_lm fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    std::cout << "[llama gpu] " << dir.string() << std::endl;
    SCOPED_TRACE(dir.string());
    parity::CausalLmFixture f(dir, manifest, cuda);
    const auto& tol = f.tol;
    {
      at::NoGradGuard noGrad;
      const auto logits = f.forward();
      ASSERT_TRUE(logits.is_cuda());
      EXPECT_TRUE(test::allClose(f.where(logits).cpu(), f.where(f.outputs.at("logits")), tol.atol, tol.rtol))
          << "logits";
      EXPECT_TRUE(
          test::allClose(f.loss(logits).cpu().reshape({1}), f.outputs.at("loss").reshape({1}), tol.atol, tol.rtol))
          << "loss";
    }
    f.withAdapter(dir);
    for (const auto& a : f.net->adapters()) ASSERT_TRUE(a->down.is_cuda()) << a->hostPath();
    const auto logits = f.forward();
    EXPECT_TRUE(
        test::allClose(f.where(logits).detach().cpu(), f.where(f.outputs.at("logits_lora")), tol.atol, tol.rtol))
        << "logits_lora";
    const auto loss = f.loss(logits);
    EXPECT_TRUE(
        test::allClose(loss.detach().cpu().reshape({1}), f.outputs.at("loss_lora").reshape({1}), tol.atol, tol.rtol))
        << "loss_lora";
    loss.backward();
    const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
    const auto after = io::loadSafetensors(dir / "lora_after_adamw.safetensors");
    const auto sd = f.net->stateDict("base_model.model.");
    ASSERT_EQ(sd.size(), grads.size());
    for (const auto& [key, param] : sd) {
      ASSERT_TRUE(param.grad().defined()) << key;
      EXPECT_TRUE(test::allClose(param.grad().cpu(), grads.at(key), tol.atol, tol.rtol)) << "grad " << key;
    }
    torch::optim::AdamW optimizer(f.net->parameters(), parity::adamwOptionsOf(manifest));
    optimizer.step();
    for (const auto& [key, param] : sd)
      EXPECT_TRUE(test::allClose(param.detach().cpu(), after.at(key), tol.atol, tol.rtol)) << "after AdamW " << key;
  }
}

TEST(LlamaGpu, TinyModelSplitOverTwoGpusEqualsOneGpu) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  const c10::Device gpu0(c10::kCUDA, 0), gpu1(c10::kCUDA, 1);
  torch::manual_seed(11);
  const llama::LlamaConfig cfg = llama::LlamaConfig::tiny();
  llama::LlamaForCausalLM one(cfg, {gpu0, at::kFloat}), split(cfg, {gpu0, at::kFloat});
  {
    at::NoGradGuard g;
    auto sp = split.named_parameters();
    for (const auto& p : one.named_parameters()) sp[p.key()].copy_(p.value());
  }
  lora::LoraConfig lc;
  lc.rank = 4;
  lc.targetModules = llama::peftDefaultTargets();
  auto la = lora::LoraNetwork::create(one, lc), lb = lora::LoraNetwork::create(split, lc);
  for (size_t i = 0; i < la->adapters().size(); ++i) {
    at::NoGradGuard g;
    la->adapters()[i]->up.normal_(0, 0.1);
    lb->adapters()[i]->setWeights(la->adapters()[i]->down, la->adapters()[i]->up);
  }
  // Layers 0 on cuda:0, the rest on cuda:1; stem and head on cuda:0 (the seed's split).
  std::vector<c10::Device> devs;
  for (int64_t i = 0; i < cfg.numHiddenLayers; ++i) devs.push_back(i == 0 ? gpu0 : gpu1);
  placement::Placement p(split.blockList(), devs, gpu0, gpu0);
  p.attachAll(lb->attachments());
  p.apply();
  ASSERT_TRUE(p.audit().empty()) << placement::formatAudit(p.audit());
  EXPECT_EQ(lb->adapters().back()->device(), gpu1);
  llama::LlamaInputs in;
  in.inputIds = at::randint(1, cfg.vocabSize, {2, 9}, at::TensorOptions(gpu0).dtype(at::kLong));
  in.attentionMask = at::ones({2, 9}, at::TensorOptions(gpu0).dtype(at::kLong));
  const auto labels = in.inputIds.clone();
  const auto ya = one.forward(in);
  const auto yb = split.forward(in, &p);
  EXPECT_EQ(yb.device(), gpu0);
  EXPECT_TRUE(test::allClose(yb.cpu(), ya.cpu(), 1e-5, 1e-4));
  llama::causalLmLoss(ya, labels).backward();
  llama::causalLmLoss(yb, labels).backward();
  for (size_t i = 0; i < la->adapters().size(); ++i)
    EXPECT_TRUE(test::allClose(lb->adapters()[i]->up.grad().cpu(), la->adapters()[i]->up.grad().cpu(), 1e-5, 1e-4))
        << la->adapters()[i]->hostPath();
}

TEST(LlamaGpu, EightBShapedLoraStepTimeAndPeakMemory) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  train::releaseDeviceCaches();  // the cuBLAS workspaces too
  const int64_t before = device::memoryFigures(0).allocatedBytes;
  const llama::LlamaConfig cfg = llama::LlamaConfig::llama3_8b();
  const int64_t batch = 2, seqLen = 512;
  {
    auto t0 = std::chrono::steady_clock::now();
    llama::LlamaForCausalLM model(cfg, {cuda, at::kBFloat16});
    synchronize();
    const double buildS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t params = 0;
    for (auto& p : model.parameters()) {
      p.requires_grad_(false);
      params += p.numel();
    }
    EXPECT_EQ(params, llama::llamaParamPlan(cfg).totalParams());
    std::cout << "[llama gpu] built an 8B-shaped Llama (" << params << " parameters, bf16) in " << buildS << " s"
              << std::endl;
    lora::LoraConfig lc;
    lc.rank = 8;
    lc.alpha = 16;
    lc.targetModules = llama::peftDefaultTargets();
    auto network = lora::LoraNetwork::create(model, lc);
    network->train(true);
    EXPECT_EQ(network->adapters().size(), 7u * 32u);
    torch::optim::AdamW optimizer(network->parameters(), torch::optim::AdamWOptions(1e-4));
    std::cout << "[llama gpu] LoRA r 8 on " << network->adapters().size() << " Linears, " << network->numParameters()
              << " parameters" << std::endl;

    llama::LlamaInputs in;
    in.inputIds = at::randint(0, cfg.vocabSize, {batch, seqLen}, at::TensorOptions(cuda).dtype(at::kLong));
    in.attentionMask = at::ones({batch, seqLen}, at::TensorOptions(cuda).dtype(at::kLong));
    in.attentionMask[0].narrow(0, 0, 64).zero_();  // some left padding, as an SFT batch has
    auto labels = in.inputIds.clone();
    labels.narrow(1, 0, seqLen / 2).fill_(-100);  // loss on the second half only (the "response")

    nn::LocalRunner local;
    train::CheckpointedRunner checkpointed(local);
    for (const bool useCheckpointing : {false, true}) {
      nn::BlockRunner* runner = useCheckpointing ? static_cast<nn::BlockRunner*>(&checkpointed) : &local;
      synchronize();
      resetPeak();
      std::vector<double> stepMs;
      const int warmup = 2, measured = 5;
      double lastLoss = 0;
      for (int step = 0; step < warmup + measured; ++step) {
        synchronize();
        const auto s0 = std::chrono::steady_clock::now();
        const auto logits = model.forward(in, runner);  // [2, 512, 128256] bf16
        const auto loss = llama::causalLmLoss(logits, labels);
        loss.backward();
        optimizer.step();
        optimizer.zero_grad();
        synchronize();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
        lastLoss = loss.item<double>();
        if (step >= warmup) stepMs.push_back(ms);
      }
      EXPECT_TRUE(std::isfinite(lastLoss));
      std::cout << "[llama gpu] 8B-shaped Llama LoRA step (forward + backward + AdamW), batch 2 x 512 tokens, bf16, "
                << (useCheckpointing ? "with" : "without") << " activation checkpointing: median " << medianMs(stepMs)
                << " ms over " << measured << " steps, loss " << lastLoss << "; peak allocated "
                << gib(peakAllocatedBytes()) << " GiB" << std::endl;
    }
  }
  synchronize();
  train::releaseDeviceCaches();  // the cuBLAS workspaces too
  const auto after = device::memoryFigures(0);
  EXPECT_EQ(after.allocatedBytes, before) << "bytes left allocated on cuda:0 after the model was destroyed";
  std::cout << "[llama gpu] after: allocated " << after.allocatedBytes << " bytes, reserved " << after.reservedBytes
            << " bytes" << std::endl;
}
