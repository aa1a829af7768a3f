// GPU checks of the text encoders (label gpu; they skip without CUDA): reference
// parity on CUDA in float32 for every t5_encoder / clip_text fixture and the
// prompt embeddings of every flux_pipeline fixture; then T5-XXL and CLIP-L at
// FLUX.1's shapes with random bf16 weights encoding 512-token prompts (77 for
// CLIP), printing prompts/s and peak memory. No timing assertion.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "gpu/GpuStats.h"
#include "io/Safetensors.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/clip/ClipTextModel.h"
#include "models/t5/T5Checkpoint.h"
#include "models/t5/T5Encoder.h"
#include "parity/FluxFixture.h"
#include "parity/TextEncoderFixture.h"

namespace fs = std::filesystem;
using namespace strata;
using strata::test::fixturesOfKind;
using namespace strata::test::gpu;

namespace {

at::Tensor maskOf(const std::map<std::string, at::Tensor>& in, const at::Device& device) {
  return in.count("attention_mask") ? in.at("attention_mask").to(device) : at::Tensor();
}

// Median seconds of `fn` over `runs` after `warmup` calls, synchronised.
template <class Fn>
double medianSeconds(Fn fn, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) fn();
  torch::cuda::synchronize();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    torch::cuda::synchronize();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

TEST(TextEncodersGpu, ReferenceParityOnCudaFloat32) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto t5Fixtures = fixturesOfKind("t5_encoder");
  const auto clipFixtures = fixturesOfKind("clip_text");
  const auto pipelines = fixturesOfKind("flux_pipeline");
  ASSERT_FALSE(t5Fixtures.empty()) << "no t5_encoder fixture under " << test::referenceDir();
  ASSERT_FALSE(clipFixtures.empty()) << "no clip_text fixture under " << test::referenceDir();
  at::NoGradGuard noGrad;
  for (const auto& [dir, manifest] : t5Fixtures) {
    SCOPED_TRACE(dir.string());
    std::cout << "[text gpu] " << dir.string() << std::endl;
    const auto tol = parity::toleranceOf(manifest);
    const auto cfg = t5::T5Config::fromTransformersJson(manifest.at("config"));
    auto model = t5::loadT5Encoder(dir / parity::weightsFileOf(manifest), {cuda, at::kFloat}, cfg);
    const auto in = io::loadSafetensors(dir / "inputs.safetensors");
    const auto out = model->forward(in.at("input_ids").to(cuda), maskOf(in, cuda));
    EXPECT_TRUE(out.is_cuda());
    EXPECT_TRUE(test::allClose(out.cpu(), io::loadSafetensors(dir / "outputs.safetensors").at("last_hidden_state"),
                               tol.atol, tol.rtol))
        << "T5 last_hidden_state on CUDA";
  }
  for (const auto& [dir, manifest] : clipFixtures) {
    SCOPED_TRACE(dir.string());
    std::cout << "[text gpu] " << dir.string() << std::endl;
    const auto tol = parity::toleranceOf(manifest);
    const auto cfg = clip::ClipTextConfig::fromTransformersJson(manifest.at("config"));
    auto model = clip::loadClipTextModel(dir / parity::weightsFileOf(manifest), {cuda, at::kFloat}, cfg);
    const auto in = io::loadSafetensors(dir / "inputs.safetensors");
    const auto ref = io::loadSafetensors(dir / "outputs.safetensors");
    const auto out = model->forward(in.at("input_ids").to(cuda), maskOf(in, cuda));
    EXPECT_TRUE(test::allClose(out.lastHiddenState.cpu(), ref.at("last_hidden_state"), tol.atol, tol.rtol));
    EXPECT_TRUE(test::allClose(out.pooled.cpu(), ref.at("pooler_output"), tol.atol, tol.rtol));
  }
  for (const auto& [dir, manifest] : pipelines) {
    SCOPED_TRACE(dir.string());
    std::cout << "[text gpu] " << dir.string() << " (prompt embeddings)" << std::endl;
    const auto tol = parity::toleranceOf(manifest);
    const auto ref = io::loadSafetensors(dir / "outputs.safetensors");
    auto t5 = t5::loadT5Encoder(dir / "model", {cuda, at::kFloat});
    auto clipModel = clip::loadClipTextModel(dir / "model", {cuda, at::kFloat});
    EXPECT_TRUE(test::allClose(t5->forward(ref.at("t5_input_ids").to(cuda)).cpu(), ref.at("prompt_embeds"), tol.atol,
                               tol.rtol));
    EXPECT_TRUE(test::allClose(clipModel->forward(ref.at("clip_input_ids").to(cuda)).pooled.cpu(),
                               ref.at("pooled_prompt_embeds"), tol.atol, tol.rtol));
  }
}

TEST(TextEncodersGpu, T5XxlAtFluxShapesBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  at::NoGradGuard noGrad;
  constexpr int64_t kT5Tokens = 512;  // FLUX.1-dev's max_sequence_length
  const auto cfg = t5::T5Config::t5Xxl();
  resetPeak();
  const int64_t base = currentAllocatedBytes();
  t5::T5Encoder t5(cfg, {cuda, at::kBFloat16});
  const int64_t weights = currentAllocatedBytes() - base;
  int64_t params = 0;
  for (const auto& p : t5.parameters()) params += p.numel();
  EXPECT_EQ(params, t5::t5ParamPlan(cfg).totalParams());
  std::cout << "[text gpu] T5-XXL: " << params << " parameters, weights " << gib(weights) << " GiB (bf16)" << std::endl;
  for (const int64_t batch : {1, 4}) {
    const auto ids =
        at::randint(0, cfg.vocabSize, {batch, kT5Tokens}, at::TensorOptions().device(cuda).dtype(at::kLong));
    resetPeak();
    at::Tensor out;
    const double s = medianSeconds([&] { out = t5.forward(ids); }, 2, 10);
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{batch, kT5Tokens, cfg.dModel}));
    EXPECT_TRUE(at::isfinite(out).all().item<bool>()) << "T5-XXL bf16 output has inf/nan";
    std::cout << "[text gpu] T5-XXL bf16, batch " << batch << " x " << kT5Tokens << " tokens: " << s * 1000.0
              << " ms per call, " << batch / s << " prompts/s, peak " << gib(peakAllocatedBytes() - base) << " GiB ("
              << gib(peakAllocatedBytes() - base - weights) << " GiB above the weights)" << std::endl;
  }
}

TEST(TextEncodersGpu, ClipLAtFluxShapesBf16) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  at::NoGradGuard noGrad;
  const auto cfg = clip::ClipTextConfig::clipL();
  resetPeak();
  const int64_t base = currentAllocatedBytes();
  clip::ClipTextModel model(cfg, {cuda, at::kBFloat16});
  const int64_t weights = currentAllocatedBytes() - base;
  std::cout << "[text gpu] CLIP-L: weights " << gib(weights) << " GiB (bf16)" << std::endl;
  for (const int64_t batch : {1, 4}) {
    auto ids = at::randint(0, cfg.vocabSize - 1, {batch, cfg.maxPositionEmbeddings},
                           at::TensorOptions().device(cuda).dtype(at::kLong));
    ids.select(1, cfg.maxPositionEmbeddings - 1).fill_(cfg.vocabSize - 1);  // end-of-text last
    resetPeak();
    clip::ClipTextOutput out;
    const double s = medianSeconds([&] { out = model.forward(ids); }, 2, 10);
    EXPECT_EQ(out.pooled.sizes(), (std::vector<int64_t>{batch, cfg.hiddenSize}));
    EXPECT_TRUE(at::isfinite(out.pooled).all().item<bool>()) << "CLIP-L bf16 pooled output has inf/nan";
    std::cout << "[text gpu] CLIP-L bf16, batch " << batch << " x " << cfg.maxPositionEmbeddings
              << " tokens: " << s * 1000.0 << " ms per call, " << batch / s << " prompts/s, peak "
              << gib(peakAllocatedBytes() - base) << " GiB" << std::endl;
  }
}
