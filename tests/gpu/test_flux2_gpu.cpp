// GPU checks of the FLUX.2 transformer (label gpu; they skip without CUDA), on every
// fixture of kind "flux2_transformer": float32 forward from diffusers and BFL names
// at the fixture tolerance, bf16 at a stated tolerance (the fused norm + rotary
// kernel runs there where the build has it, with the config's eps), the 4-step
// sample, and the LoRA forward, gradients and one AdamW step on CUDA. The CPU
// versions are in tests/parity/Flux2*Checks.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "parity/Flux2Fixture.h"
#include "parity/FluxFixture.h"
#include "placement/Placement.h"

using namespace strata;
using namespace strata::test::gpu;

// bf16 on CUDA: parity::kBf16Atol / kBf16Rtol / kBf16MaxRelL2, the CPU checks' stated tolerance.

TEST(Flux2Gpu, ReferenceParityOnCudaFloat32Bf16AndSample) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("flux2_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux2_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    std::cout << "[flux2 gpu] " << dir.string() << std::endl;
    SCOPED_TRACE(dir.string());
    const auto cfg = parity::flux2ConfigOf(manifest);
    const auto tol = parity::toleranceOf(manifest);
    const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
    const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
    const auto& ref = outputs.at("output");
    at::NoGradGuard noGrad;
    for (const char* weights : {"transformer.safetensors", "transformer_bfl.safetensors"}) {
      flux2::Flux2Transformer f32(cfg, {cuda, at::kFloat});
      flux2::loadFlux2Weights(f32, dir / weights);
      const auto out32 = f32.forward(parity::flux2InputsOf(inputs, cuda));
      EXPECT_TRUE(out32.is_cuda());
      EXPECT_TRUE(test::allClose(out32, ref, tol.atol, tol.rtol)) << weights << " float32 on CUDA";

      flux2::Flux2Transformer bf16(cfg, {cuda, at::kBFloat16});
      flux2::loadFlux2Weights(bf16, dir / weights);
      const auto out16 = bf16.forward(parity::flux2InputsOf(inputs, cuda));
      EXPECT_EQ(out16.scalar_type(), at::kBFloat16);
      const double rel = relL2(out16, ref);
      std::cout << "[flux2 gpu]   " << weights << ": bf16 relative L2 error " << rel << std::endl;
      EXPECT_TRUE(test::allClose(out16, ref, parity::kBf16Atol, parity::kBf16Rtol)) << weights << " bf16 on CUDA";
      EXPECT_LT(rel, parity::kBf16MaxRelL2) << weights;
    }
    const auto& sampling = manifest.at("sampling");
    flux2::Flux2Transformer model(cfg, {cuda, at::kFloat});
    flux2::loadFlux2Weights(model, dir / "transformer.safetensors");
    const auto final =
        flux2::sample(model, outputs.at("sample_noise").to(cuda), inputs.at("encoder_hidden_states").to(cuda),
                      sampling.at("guidance_scale").get<double>(), sampling.at("steps").get<int64_t>());
    EXPECT_TRUE(final.is_cuda());
    EXPECT_TRUE(test::allClose(final, outputs.at("sample_unpacked"), tol.atol, tol.rtol)) << "sample on CUDA";
  }
}

TEST(Flux2Gpu, LoraForwardGradientsAndAdamWOnCudaEqualTheReference) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("flux2_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux2_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = parity::flux2ConfigOf(manifest);
    const auto tol = parity::toleranceOf(manifest);
    const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
    const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
    flux2::Flux2Transformer model(cfg, {cuda, at::kFloat});
    flux2::loadFlux2Weights(model, dir / "transformer.safetensors");
    for (auto& p : model.parameters()) p.set_requires_grad(false);
    lora::LoraLoadOptions options;
    options.alpha = manifest.at("lora").at("alpha").get<double>();
    auto net = lora::loadLoraNetwork(model, flux2::Flux2LoraRules(cfg), dir / "lora.safetensors", options);
    for (const auto& p : net->parameters()) ASSERT_TRUE(p.is_cuda());

    const auto out = model.forward(parity::flux2InputsOf(inputs, cuda));
    EXPECT_TRUE(test::allClose(out, outputs.at("output_lora"), tol.atol, tol.rtol)) << "output_lora on CUDA";
    const auto loss = (out - inputs.at("target").to(cuda)).pow(2).mean();
    loss.backward();
    const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
    const auto after = io::loadSafetensors(dir / "lora_after_adamw.safetensors");
    const auto sd = net->stateDict("transformer.");
    for (const auto& [key, param] : sd) {
      ASSERT_TRUE(grads.count(key)) << key << " has no reference gradient";
      ASSERT_TRUE(param.grad().defined()) << key;
      EXPECT_TRUE(test::allClose(param.grad(), grads.at(key), tol.atol, tol.rtol)) << "grad " << key;
    }
    torch::optim::AdamW optimizer(net->parameters(), parity::adamwOptionsOf(manifest));
    optimizer.step();
    for (const auto& [key, param] : sd)
      EXPECT_TRUE(test::allClose(param, after.at(key), tol.atol, tol.rtol)) << "after AdamW " << key;
    EXPECT_FALSE(sd.empty());
  }
}

// The fixture's model with its LoRA split over two GPUs (double blocks on cuda:0,
// single blocks on cuda:1, head on cuda:1): the audit is clean before the step, and
// the output, the loss gradients of every adapter (the shared modulation's included,
// which live with the stem on cuda:0 and feed blocks on both cards) equal the reference.
TEST(Flux2Gpu, SplitOverTwoGpusWithLoraEqualsTheReference) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  const at::Device cuda0(at::kCUDA, 0), cuda1(at::kCUDA, 1);
  const auto fixtures = test::fixturesOfKind("flux2_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux2_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = parity::flux2ConfigOf(manifest);
    const auto tol = parity::toleranceOf(manifest);
    const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
    const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
    flux2::Flux2Transformer model(cfg);
    flux2::loadFlux2Weights(model, dir / "transformer.safetensors");
    for (auto& p : model.parameters()) p.set_requires_grad(false);
    lora::LoraLoadOptions options;
    options.alpha = manifest.at("lora").at("alpha").get<double>();
    auto net = lora::loadLoraNetwork(model, flux2::Flux2LoraRules(cfg), dir / "lora.safetensors", options);
    std::vector<c10::Device> devs;
    for (int64_t i = 0; i < cfg.numLayers; ++i) devs.push_back(cuda0);
    for (int64_t i = 0; i < cfg.numSingleLayers; ++i) devs.push_back(cuda1);
    placement::Placement split(model.blockList(), devs, cuda0, cuda1);
    split.attachAll(net->attachments());
    split.apply();
    split.auditOrThrow("before the forward");
    const auto out = model.forward(parity::flux2InputsOf(inputs, cuda0), &split);
    EXPECT_EQ(out.device(), cuda1);
    EXPECT_TRUE(test::allClose(out, outputs.at("output_lora"), tol.atol, tol.rtol)) << "split output_lora";
    (out - inputs.at("target").to(out.device())).pow(2).mean().backward();
    EXPECT_TRUE(split.audit().empty()) << "gradients off their block's device";
    const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
    for (const auto& [key, param] : net->stateDict("transformer.")) {
      ASSERT_TRUE(param.grad().defined()) << key;
      EXPECT_TRUE(test::allClose(param.grad(), grads.at(key), tol.atol, tol.rtol)) << "split grad " << key;
    }
  }
}
