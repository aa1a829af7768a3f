// GPU checks of the FLUX transformer (label gpu; they skip without CUDA):
// reference parity on CUDA (float32 at the fixture tolerance, bf16 at a stated
// tolerance), and one LoRA training step of a FLUX.1-dev-sized model with random
// bf16 weights at 1024x1024 (4096 image tokens) and 512 text tokens, printing
// the median step time and the peak memory.
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
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "parity/FluxFixture.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

// bf16 on CUDA: parity::kBf16Atol / kBf16Rtol / kBf16MaxRelL2, the CPU checks' stated tolerance.

TEST(FluxGpu, ReferenceParityOnCudaFloat32AndBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("flux_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    std::cout << "[flux gpu] " << dir.string() << std::endl;
    SCOPED_TRACE(dir.string());
    const auto cfg = FluxConfig::fromDiffusersJson(manifest.at("config"));
    const double atol = manifest.contains("tolerance") ? manifest["tolerance"].value("atol", 1e-4) : 1e-4;
    const double rtol = manifest.contains("tolerance") ? manifest["tolerance"].value("rtol", 1e-3) : 1e-3;
    const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
    const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
    const auto& ref = outputs.at("output");
    at::NoGradGuard noGrad;
    for (const char* weights : {"transformer.safetensors", "transformer_bfl.safetensors"}) {
      FluxTransformer f32(cfg, {cuda, at::kFloat});
      loadFluxWeights(f32, dir / weights);
      const auto out32 = f32.forward(parity::inputsOf(inputs, cuda));
      EXPECT_TRUE(out32.is_cuda());
      EXPECT_TRUE(test::allClose(out32, ref, atol, rtol)) << weights << " float32 on CUDA";

      FluxTransformer bf16(cfg, {cuda, at::kBFloat16});
      loadFluxWeights(bf16, dir / weights);
      const auto out16 = bf16.forward(parity::inputsOf(inputs, cuda));
      EXPECT_EQ(out16.scalar_type(), at::kBFloat16);
      const double rel = relL2(out16, ref);
      std::cout << "[flux gpu]   " << weights << ": bf16 relative L2 error " << rel << ", max abs error "
                << (out16.to(at::kFloat).cpu() - ref).abs().max().item<double>() << std::endl;
      EXPECT_TRUE(test::allClose(out16, ref, parity::kBf16Atol, parity::kBf16Rtol)) << weights << " bf16 on CUDA";
      EXPECT_LT(rel, parity::kBf16MaxRelL2) << weights;
    }
    // The 4-step Euler sample in float32 on CUDA.
    const auto& sampling = manifest.at("sampling");
    FluxTransformer model(cfg, {cuda, at::kFloat});
    loadFluxWeights(model, dir / "transformer.safetensors");
    const auto& noise = outputs.at("sample_noise");
    const auto sigmas = samplingSigmas(sampling.at("steps").get<int64_t>(), shiftMu(noise.size(1)));
    const auto final =
        samplePacked(model, noise.to(cuda), inputs.at("img_ids").to(cuda), inputs.at("encoder_hidden_states").to(cuda),
                     inputs.at("txt_ids").to(cuda), inputs.at("pooled_projections").to(cuda),
                     sampling.at("guidance").get<double>(), sigmas);
    EXPECT_TRUE(test::allClose(final, outputs.at("sample_final"), atol, rtol)) << "sample on CUDA";
  }
}

// The fixture's LoRA on CUDA in float32: forward, loss, the LoRA gradients and
// one AdamW step equal the peft reference (the CPU versions are in tests/parity).
TEST(FluxGpu, LoraForwardGradientsAndAdamWOnCudaEqualTheReference) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("flux_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = FluxConfig::fromDiffusersJson(manifest.at("config"));
    const auto tol = parity::toleranceOf(manifest);
    const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
    const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
    FluxTransformer model(cfg, {cuda, at::kFloat});
    loadFluxWeights(model, dir / "transformer.safetensors");
    for (auto& p : model.parameters()) p.set_requires_grad(false);
    lora::LoraLoadOptions options;
    options.alpha = manifest.at("lora").at("alpha").get<double>();
    auto net = lora::loadLoraNetwork(model, FluxLoraRules(cfg), dir / "lora.safetensors", options);
    for (const auto& p : net->parameters()) ASSERT_TRUE(p.is_cuda());

    const auto out = model.forward(parity::inputsOf(inputs, cuda));
    EXPECT_TRUE(test::allClose(out, outputs.at("output_lora"), tol.atol, tol.rtol)) << "output_lora on CUDA";
    const auto loss = (out - inputs.at("target").to(cuda)).pow(2).mean();
    const auto& refLoss = outputs.at("loss");
    EXPECT_TRUE(test::allClose(loss.reshape(refLoss.sizes()), refLoss, tol.atol, tol.rtol)) << "loss on CUDA";
    loss.backward();

    const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
    const auto after = io::loadSafetensors(dir / "lora_after_adamw.safetensors");
    const auto sd = net->stateDict("transformer.");
    size_t compared = 0;
    for (const auto& [key, param] : sd) {
      ASSERT_TRUE(grads.count(key)) << key << " has no reference gradient";
      ASSERT_TRUE(param.grad().defined()) << key;
      EXPECT_TRUE(test::allClose(param.grad(), grads.at(key), tol.atol, tol.rtol)) << "grad " << key;
      ++compared;
    }
    torch::optim::AdamW optimizer(net->parameters(), parity::adamwOptionsOf(manifest));
    optimizer.step();
    for (const auto& [key, param] : sd)
      EXPECT_TRUE(test::allClose(param, after.at(key), tol.atol, tol.rtol)) << "after AdamW " << key;
    std::cout << "[flux gpu] LoRA on CUDA: output, loss, " << compared << " gradients and AdamW compared" << std::endl;
    EXPECT_GT(compared, 0u);
  }
}

TEST(FluxGpu, FluxDevSizedLoraStepTimeAndPeakMemory) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto cfg = FluxConfig::fluxDev();
  const int64_t imageTokens = 4096;  // 1024x1024 image: 128x128 latent, 2x2 packed
  const int64_t textTokens = 512;
  std::cout << "[flux gpu] flash SDPA enabled: " << compat::flashAttentionEnabled() << std::endl;

  auto t0 = std::chrono::steady_clock::now();
  FluxTransformer model(cfg, {cuda, at::kBFloat16});
  synchronize();
  const double buildS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t params = 0;
  for (auto& p : model.parameters()) {
    p.requires_grad_(false);  // frozen base
    params += p.numel();
    ASSERT_TRUE(p.is_cuda());
  }
  EXPECT_EQ(params, fluxParamPlan(cfg).totalParams());
  std::cout << "[flux gpu] built FLUX.1-dev-sized model (" << params << " parameters, bf16) in " << buildS << " s"
            << std::endl;

  lora::LoraConfig lc;
  lc.rank = 16;
  lc.alpha = 16;
  auto network = lora::LoraNetwork::create(model, lc, FluxLoraRules(cfg));
  network->train(true);
  torch::optim::AdamW optimizer(network->parameters(), torch::optim::AdamWOptions(1e-4));
  std::cout << "[flux gpu] LoRA rank 16 on " << network->adapters().size() << " Linears, " << network->numParameters()
            << " parameters" << std::endl;

  const auto bf16 = at::TensorOptions(cuda).dtype(at::kBFloat16);
  FluxInputs in;
  in.img = at::randn({1, imageTokens, cfg.inChannels}, bf16);
  in.txt = at::randn({1, textTokens, cfg.jointAttentionDim}, bf16);
  in.pooled = at::randn({1, cfg.pooledProjectionDim}, bf16);
  in.timestep = at::rand({1}, at::TensorOptions(cuda));
  in.guidance = at::ones({1}, at::TensorOptions(cuda));
  in.imgIds = imageIds(128, 128, at::TensorOptions(cuda));
  in.txtIds = textIds(textTokens, at::TensorOptions(cuda));
  ASSERT_EQ(in.imgIds.size(0), imageTokens);
  const auto target = at::randn({1, imageTokens, cfg.outChannels}, at::TensorOptions(cuda));

  synchronize();
  resetPeak();
  std::vector<double> stepMs;
  const int warmup = 2, measured = 5;
  double lastLoss = 0;
  for (int step = 0; step < warmup + measured; ++step) {
    synchronize();
    const auto s0 = std::chrono::steady_clock::now();
    const auto out = model.forward(in);  // [1, 4096, 64]
    const auto loss = (out.to(at::kFloat) - target).pow(2).mean();
    loss.backward();
    if (step == warmup + measured - 1) {
      // Every adapter got a gradient (up starts at zero, so its grad is the non-zero one).
      int withGrad = 0;
      for (const auto& a : network->adapters())
        if (a->up.grad().defined() && a->up.grad().abs().sum().item<double>() > 0) ++withGrad;
      EXPECT_EQ(withGrad, static_cast<int>(network->adapters().size()));
    }
    optimizer.step();
    optimizer.zero_grad();
    synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
    lastLoss = loss.item<double>();
    if (step >= warmup) stepMs.push_back(ms);
    std::cout << "[flux gpu]   step " << step << ": " << ms << " ms, loss " << lastLoss << std::endl;
  }
  EXPECT_TRUE(std::isfinite(lastLoss));
  std::cout << "[flux gpu] FLUX.1-dev-sized LoRA step, 1024x1024 (4096 image + 512 text tokens), batch 1, bf16, "
               "no checkpointing: median "
            << medianMs(stepMs) << " ms over " << measured << " steps; peak allocated " << gib(peakAllocatedBytes())
            << " GiB, peak reserved " << gib(peakReservedBytes()) << " GiB" << std::endl;
}
