// GPU checks of the AutoencoderKL (label gpu; they skip without CUDA): reference
// parity on CUDA (float32 at the fixture tolerance, bf16 at a stated one) for
// every "vae" folder, the VAE of every "flux_pipeline" folder and FLUX.2's VAE of
// every "flux2_pipeline" folder, and the
// FLUX.1 VAE (random bf16 weights) at 1024 px: encode and decode images/s and
// peak memory, whole and in 512 px tiles, printed (no timing assertion).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <chrono>
#include <functional>
#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "io/Safetensors.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "parity/Flux2PipelineVaeFixture.h"
#include "parity/VaeFixture.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::test::gpu;

namespace {

// bf16 keeps 8 mantissa bits and the tiny fixture VAEs have random weights;
// measured on the CPU (LibTorch 1.13, whose bf16 conv accumulates coarsely) the
// error is 7% of the output's norm; cuDNN accumulates in float32. Stated bound:
constexpr double kBf16MaxRelL2 = 5e-2;

// Median milliseconds of `runs` calls of `fn` after `warmup` calls, synchronised.
double timeMs(const std::function<void()>& fn, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return medianMs(ms);
}

}  // namespace

TEST(VaeGpu, ReferenceParityOnCudaFloat32AndBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto folders = test::fixturesOfKind("vae");
  ASSERT_FALSE(folders.empty()) << "no vae fixture under " << test::referenceDir();
  at::NoGradGuard noGrad;
  const NoTf32 exactFloat32;
  for (const auto& [dir, manifest] : folders) {
    std::cout << "[vae gpu] " << dir.string() << std::endl;
    SCOPED_TRACE(dir.string());
    parity::expectVaeFolderMatches(dir, manifest, cuda);  // float32 on CUDA

    const auto cfg = vae::VaeConfig::fromDiffusersJson(manifest.at("config"));
    vae::AutoencoderKL bf16(cfg, {cuda, at::kBFloat16});
    vae::loadVaeWeights(bf16, dir / "vae.safetensors");
    const auto in = io::loadSafetensors(dir / "inputs.safetensors");
    const auto out = io::loadSafetensors(dir / "outputs.safetensors");
    const auto dist = bf16.encode(in.at("image"));
    EXPECT_EQ(dist.mean.scalar_type(), at::kBFloat16);
    const auto decoded = bf16.decode(out.at("latent_mean"));
    const double encodeRel = relL2(dist.mean, out.at("latent_mean"));
    const double decodeRel = relL2(decoded, out.at("decoded"));
    std::cout << "[vae gpu]   bf16: latent_mean relative L2 " << encodeRel << ", decoded relative L2 " << decodeRel
              << std::endl;
    EXPECT_LT(encodeRel, kBf16MaxRelL2) << "bf16 encode on CUDA";
    EXPECT_LT(decodeRel, kBf16MaxRelL2) << "bf16 decode on CUDA";
  }
  for (const auto& [dir, manifest] : test::fixturesOfKind("flux_pipeline")) {
    std::cout << "[vae gpu] " << dir.string() << " (pipeline VAE)" << std::endl;
    SCOPED_TRACE(dir.string());
    auto model = parity::pipelineVae(dir, cuda);
    EXPECT_TRUE(model->device().is_cuda());
    parity::expectPipelineVaeMatches(*model, dir, manifest);
  }
}

// FLUX.2's VAE of every "flux2_pipeline" folder on CUDA in float32 (TF32 off), from
// the diffusers folder and from BFL's single file: the CPU parity checks' numbers
// (tests/parity/Flux2PipelineVaeChecks.cpp) at each output's tolerance.
TEST(VaeGpu, Flux2PipelineVaeParityOnCuda) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto folders = test::fixturesOfKind("flux2_pipeline");
  ASSERT_FALSE(folders.empty()) << "no flux2_pipeline fixture under " << test::referenceDir();
  const NoTf32 exactFloat32;
  for (const auto& [dir, manifest] : folders) {
    const parity::Flux2PipelineFixture f(dir, manifest);
    for (const bool single : {false, true}) {
      std::cout << "[vae gpu] " << dir.string() << " (FLUX.2 VAE from " << (single ? "singles" : "model/vae") << ")"
                << std::endl;
      SCOPED_TRACE(dir.string() + (single ? " singles/flux2-vae.safetensors" : " model/vae"));
      auto model = parity::flux2PipelineVae(f, single, cuda);
      EXPECT_TRUE(model->device().is_cuda());
      EXPECT_TRUE(model->bn->runningMean.is_cuda());
      parity::expectFlux2PipelineVaeMatches(*model, f);
      if (!single) parity::expectFlux2CodecMatches(model, f, "model/vae");
    }
  }
}

TEST(VaeGpu, Flux1VaeAt1024PxInBf16SpeedAndMemory) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto cfg = vae::VaeConfig::flux1();
  at::NoGradGuard noGrad;
  synchronize();
  const int64_t before = currentAllocatedBytes();
  vae::AutoencoderKL model(cfg, {cuda, at::kBFloat16});  // random weights, torch.nn.Conv2d's init
  synchronize();
  const int64_t weightBytes = currentAllocatedBytes() - before;
  std::cout << "[vae gpu] FLUX.1 VAE: " << vae::vaeParamCount(cfg) << " parameters, " << gib(weightBytes)
            << " GiB of bf16 weights" << std::endl;

  auto gen = at::detail::createCPUGenerator(1234);
  const auto image1 = (at::rand({1, 3, 1024, 1024}, gen, at::kFloat) * 2 - 1).to(cuda, at::kBFloat16);
  const auto image4 = (at::rand({4, 3, 1024, 1024}, gen, at::kFloat) * 2 - 1).to(cuda, at::kBFloat16);

  // One encode first: shapes and finiteness are the assertions of this test.
  const auto dist = model.encode(image1);
  ASSERT_EQ(dist.mean.sizes().vec(), (std::vector<int64_t>{1, 16, 128, 128}));
  EXPECT_TRUE(at::isfinite(dist.mean).all().item<bool>());
  EXPECT_TRUE(at::isfinite(dist.logvar).all().item<bool>());
  const auto decoded = model.decode(dist.mean);
  ASSERT_EQ(decoded.sizes().vec(), (std::vector<int64_t>{1, 3, 1024, 1024}));
  EXPECT_TRUE(at::isfinite(decoded).all().item<bool>());

  struct Case {
    std::string name;
    int64_t images;
    std::function<void()> run;
  };
  const vae::VaeTiling tiles512{512, 0.25};
  const std::vector<Case> cases = {
      {"encode 1x1024px", 1, [&] { model.encode(image1); }},
      {"encode 4x1024px", 4, [&] { model.encode(image4); }},
      {"encode 1x1024px in 512px tiles", 1, [&] { model.encode(image1, tiles512); }},
      {"decode 1x1024px", 1, [&] { model.decode(dist.mean); }},
  };
  for (const auto& c : cases) {
    synchronize();
    resetPeak();
    const double ms = timeMs(c.run, 2, 10);
    const int64_t peak = peakAllocatedBytes();
    std::cout << "[vae gpu] " << c.name << ": median " << ms << " ms, " << 1000.0 * c.images / ms
              << " images/s; peak allocated " << gib(peak) << " GiB (activations " << gib(peak - before - weightBytes)
              << " GiB), peak reserved " << gib(peakReservedBytes()) << " GiB" << std::endl;
    EXPECT_GT(ms, 0.0);
  }

  // bf16 against float32 with the same weights at this size (a figure, no bound).
  vae::AutoencoderKL f32(cfg, {cuda, at::kFloat});
  const auto bf16Params = model.named_parameters(true);
  for (auto& p : f32.named_parameters(true)) p.value().copy_(bf16Params[p.key()]);
  const auto ref = f32.encode(image1.to(at::kFloat));
  std::cout << "[vae gpu] bf16 vs float32 encode at 1024 px (same weights): latent mean relative L2 "
            << relL2(dist.mean, ref.mean) << std::endl;
}

// FLUX.2's VAE at its real shape (VaeConfig::flux2: 32 latent channels, quant
// convs), random bf16 weights, at 1024 px: the training latents' shape
// [1, 128, 64, 64] and the round trip back to an image, then encode / decode
// images/s and peak memory beside the planner's estimate, printed (no timing assertion).
TEST(VaeGpu, Flux2VaeAt1024PxInBf16SpeedAndMemory) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto cfg = vae::VaeConfig::flux2();
  at::NoGradGuard noGrad;
  synchronize();
  const int64_t before = currentAllocatedBytes();
  vae::AutoencoderKL model(cfg, {cuda, at::kBFloat16});
  synchronize();
  const int64_t weightBytes = currentAllocatedBytes() - before;
  std::cout << "[vae gpu] FLUX.2 VAE: " << vae::vaeParamCount(cfg) << " parameters, " << gib(weightBytes)
            << " GiB of bf16 weights" << std::endl;

  auto gen = at::detail::createCPUGenerator(4321);
  const auto image = (at::rand({1, 3, 1024, 1024}, gen, at::kFloat) * 2 - 1).to(cuda, at::kBFloat16);
  const auto mode = model.encode(image).mean;
  ASSERT_EQ(mode.sizes().vec(), (std::vector<int64_t>{1, 32, 128, 128}));
  const auto train = model.toTrainingLatents(mode);
  ASSERT_EQ(train.sizes().vec(), (std::vector<int64_t>{1, 128, 64, 64}));
  EXPECT_TRUE(at::isfinite(train).all().item<bool>());
  const auto decoded = model.decode(model.fromTrainingLatents(train));
  ASSERT_EQ(decoded.sizes().vec(), (std::vector<int64_t>{1, 3, 1024, 1024}));
  EXPECT_TRUE(at::isfinite(decoded).all().item<bool>());

  for (const bool encode : {true, false}) {
    synchronize();
    resetPeak();
    const double ms = timeMs([&] { encode ? (void)model.encode(image) : (void)model.decode(mode); }, 2, 10);
    const int64_t peak = peakAllocatedBytes();
    const int64_t estimate =
        encode ? vae::vaeEncodePeakBytes(cfg, 1, 1024, 1024, 2) : vae::vaeDecodePeakBytes(cfg, 1, 1024, 1024, 2);
    std::cout << "[vae gpu] FLUX.2 " << (encode ? "encode" : "decode") << " 1x1024px bf16: median " << ms << " ms, "
              << 1000.0 / ms << " images/s; activations " << gib(peak - before - weightBytes) << " GiB (estimate "
              << gib(estimate) << " GiB)" << std::endl;
    EXPECT_GT(ms, 0.0);
  }
}
