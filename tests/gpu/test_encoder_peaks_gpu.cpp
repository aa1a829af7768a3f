// The planner's activation estimates for the caching phase and the sample decode
// (t5EncodePeakBytes, clipEncodePeakBytes, vaeEncodePeakBytes, vaeDecodePeakBytes)
// against the caching allocator's peak on CUDA, with random weights at FLUX.1's
// shapes in bf16 (label gpu; skips without CUDA). Each estimate must be within
// kBand of the measured peak above the weights and the inputs, so a plan that
// says "fits" does not run out of memory while the cache is built.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <functional>
#include <iostream>

#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "models/clip/ClipTextModel.h"
#include "models/t5/T5Encoder.h"
#include "models/vae/AutoencoderKL.h"

using namespace strata;
using namespace strata::test::gpu;

namespace {

// Measured / estimated may differ by this much either way (cuDNN's workspace
// choice and cuBLAS's own workspace are not in the walk).
constexpr double kBand = 0.25;

// The peak allocated above what is allocated before `fn` runs (weights, inputs).
int64_t measuredPeak(const std::function<void()>& fn) {
  fn();  // warm up: cuDNN / cuBLAS handles and workspaces
  synchronize();
  const int64_t before = currentAllocatedBytes();
  resetPeak();
  fn();
  synchronize();
  return peakAllocatedBytes() - before;
}

void expectWithinBand(const std::string& what, int64_t estimated, int64_t measured) {
  const double ratio = static_cast<double>(estimated) / static_cast<double>(measured);
  std::cout << "[peak gpu] " << what << ": estimated " << gib(estimated) << " GiB, measured " << gib(measured)
            << " GiB (estimate / measured " << ratio << ")" << std::endl;
  EXPECT_GT(ratio, 1.0 - kBand) << what;
  EXPECT_LT(ratio, 1.0 + kBand) << what;
}

}  // namespace

TEST(EncoderPeaksGpu, Flux1VaeEncodeAndDecodeInBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  at::NoGradGuard noGrad;
  const auto cfg = vae::VaeConfig::flux1();
  vae::AutoencoderKL model(cfg, {cuda, at::kBFloat16});
  auto gen = at::detail::createCPUGenerator(7);
  for (const auto& [batch, px] : std::vector<std::pair<int64_t, int64_t>>{{1, 512}, {1, 1024}, {4, 1024}}) {
    const auto image = (at::rand({batch, 3, px, px}, gen, at::kFloat) * 2 - 1).to(cuda, at::kBFloat16);
    const auto latents = model.encode(image).mean;
    const std::string size = std::to_string(batch) + "x" + std::to_string(px) + "px";
    expectWithinBand("VAE encode " + size, vae::vaeEncodePeakBytes(cfg, batch, px, px, 2),
                     measuredPeak([&] { (void)model.encode(image); }));
    expectWithinBand("VAE decode " + size, vae::vaeDecodePeakBytes(cfg, batch, px, px, 2),
                     measuredPeak([&] { (void)model.decode(latents); }));
  }
}

TEST(EncoderPeaksGpu, T5XxlAndClipLInBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  at::NoGradGuard noGrad;
  const auto t5cfg = t5::T5Config::t5Xxl();
  t5::T5Encoder t5(t5cfg, {cuda, at::kBFloat16});
  for (const int64_t batch : {1, 4}) {
    const auto ids = at::randint(0, t5cfg.vocabSize, {batch, 512}, at::TensorOptions().dtype(at::kLong)).to(cuda);
    expectWithinBand("T5-XXL " + std::to_string(batch) + "x512 tokens", t5::t5EncodePeakBytes(t5cfg, batch, 512, 2),
                     measuredPeak([&] { (void)t5.forward(ids); }));
  }
  // CLIP-L's activations are tens of MB, the size of cuBLAS's workspace: printed, not bounded.
  const auto clipCfg = clip::ClipTextConfig::clipL();
  clip::ClipTextModel clip(clipCfg, {cuda, at::kBFloat16});
  const auto ids =
      at::randint(0, clipCfg.vocabSize, {4, clipCfg.maxPositionEmbeddings}, at::TensorOptions().dtype(at::kLong))
          .to(cuda);
  const int64_t measured = measuredPeak([&] { (void)clip.forward(ids); });
  std::cout << "[peak gpu] CLIP-L 4x77 tokens: estimated " << gib(clip::clipEncodePeakBytes(clipCfg, 4, 2))
            << " GiB, measured " << gib(measured) << " GiB" << std::endl;
  EXPECT_GT(measured, 0);
}
