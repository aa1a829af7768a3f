// FLUX.2's text encoders on CUDA (label gpu; skips without a device): every
// flux2_pipeline fixture's ids, hidden states, prompt embeddings and empty-prompt
// embeddings in float32 on the card, against the reference; then the klein-9B
// text encoder's shape (Qwen3-8B up to layer 27) with random bf16 weights encoding
// 512-token prompts, printing prompts/s and the peak memory. No timing assertion.
// With two cards: the encoder split by layers over cuda:0 and cuda:1 (as a caching
// plan splits it) gives the one-card embeddings, back on cuda:0, and its release
// gives both cards back their memory.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <chrono>
#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "families/flux2/Flux2ImageModels.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "gpu/GpuStats.h"
#include "models/llama/LlamaForCausalLM.h"
#include "parity/Flux2PipelineFixture.h"
#include "placement/Placement.h"

using namespace strata;
using namespace strata::families;
using namespace strata::test::gpu;

TEST(Flux2TextGpu, PipelineFixturesOnCudaFloat32) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const at::Device cuda(at::kCUDA, 0);
  const auto fixtures = test::fixturesOfKind("flux2_pipeline");
  if (fixtures.empty()) GTEST_SKIP() << "no flux2_pipeline fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    std::cout << "[flux2 text gpu] " << dir.string() << std::endl;
    parity::Flux2PipelineFixture f(dir, manifest);
    Flux2TextEncoderOptions o;
    o.device = cuda;
    o.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
    o.outLayers = manifest.at("text_encoder_out_layers").get<std::vector<int64_t>>();
    const auto enc = Flux2PromptEncoder::load(Flux2TextEncoderFiles::fromDiffusersFolder(f.modelDir()), o);
    const auto e = enc->encodeDetailed(manifest.at("prompts").get<std::vector<std::string>>());
    EXPECT_TRUE(at::equal(e.prompt.ids, f.outputs.at("input_ids")));
    EXPECT_TRUE(at::equal(e.prompt.mask, f.outputs.at("attention_mask")));
    EXPECT_TRUE(e.embeds.is_cuda());
    for (size_t i = 0; i < o.outLayers.size(); ++i) {
      const std::string name = "hidden_state_" + std::to_string(o.outLayers[i]);
      const auto tol = f.toleranceFor(name);
      EXPECT_TRUE(test::allClose(e.hiddenStates[i].cpu(), f.outputs.at(name), tol.atol, tol.rtol)) << name;
    }
    const auto tol = f.toleranceFor("prompt_embeds");
    EXPECT_TRUE(test::allClose(e.embeds.cpu(), f.outputs.at("prompt_embeds"), tol.atol, tol.rtol)) << "prompt_embeds";
    if (f.outputs.count("negative_prompt_embeds")) {
      const auto& ref = f.outputs.at("negative_prompt_embeds");
      const auto neg = enc->encode({""}).cpu().expand({ref.size(0), -1, -1});
      const auto ntol = f.toleranceFor("negative_prompt_embeds");
      EXPECT_TRUE(test::allClose(neg, ref, ntol.atol, ntol.rtol)) << "negative_prompt_embeds";
    }
  }
}

TEST(Flux2TextGpu, Qwen3EightBShapeBf16UpToLayer27) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const auto fixtures = test::fixturesOfKind("flux2_pipeline");
  std::filesystem::path tokenizer;
  for (const auto& [dir, manifest] : fixtures)
    if (manifest.value("variant", "") == "klein") tokenizer = dir / "model" / "tokenizer";
  if (tokenizer.empty())
    GTEST_SKIP() << "no klein flux2_pipeline fixture (its tokenizer) under " << test::referenceDir();
  const at::Device cuda(at::kCUDA, 0);
  // Qwen3-8B: hidden 4096, 36 layers, 32 heads x 128, 8 kv heads, intermediate 12288.
  llama::LlamaConfig c;
  c.modelType = "qwen3";
  c.qkNorm = true;
  c.vocabSize = 151936;
  c.hiddenSize = 4096;
  c.intermediateSize = 12288;
  c.numHiddenLayers = 36;
  c.numAttentionHeads = 32;
  c.numKeyValueHeads = 8;
  c.headDim = 128;
  c.ropeTheta = 1e6;
  c.maxPositionEmbeddings = 40960;
  Flux2TextEncoderOptions o;
  o.device = cuda;
  o.dtype = at::kBFloat16;
  resetPeak();
  const int64_t base = currentAllocatedBytes();
  const auto enc = Flux2PromptEncoder::random(tokenizer, Flux2TextEncoderKind::kQwen3, c, o);
  const int64_t weights = currentAllocatedBytes() - base;
  EXPECT_EQ(enc->model()->layerCount(), 27u);  // layers 27..35 are never built
  EXPECT_EQ(enc->width(), 12288);
  std::cout << "[flux2 text gpu] Qwen3-8B up to layer 27: weights " << gib(weights) << " GiB (bf16)" << std::endl;
  for (const int64_t batch : {1, 8}) {
    const std::vector<std::string> prompts(static_cast<size_t>(batch), "a photo of sks person wearing a red hat");
    enc->encode(prompts);  // warm-up
    torch::cuda::synchronize();
    resetPeak();
    const auto t0 = std::chrono::steady_clock::now();
    const auto e = enc->encode(prompts);
    torch::cuda::synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(e.sizes(), (std::vector<int64_t>{batch, 512, 12288}));
    EXPECT_TRUE(at::isfinite(e).all().item<bool>());
    std::cout << "[flux2 text gpu] batch " << batch << ": " << batch / s << " prompts/s, peak "
              << gib(peakAllocatedBytes()) << " GiB" << std::endl;
  }
}

namespace {

// Layers [0, n/2) on cuda:0, the rest and the final norm on cuda:1, as a caching plan splits them.
void splitInTwo(Flux2TextEncoderOptions& o, size_t layers) {
  o.layerDevices.clear();
  for (size_t i = 0; i < layers; ++i) o.layerDevices.emplace_back(at::kCUDA, i < layers / 2 ? 0 : 1);
  o.headDevice = at::Device(at::kCUDA, 1);
}

}  // namespace

TEST(Flux2TextGpu, SplitOverTwoCardsGivesTheOneCardEmbeddings) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  const auto fixtures = test::fixturesOfKind("flux2_pipeline");
  if (fixtures.empty()) GTEST_SKIP() << "no flux2_pipeline fixture under " << test::referenceDir();
  const at::Device cuda0(at::kCUDA, 0);
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    parity::Flux2PipelineFixture f(dir, manifest);
    const auto files = Flux2TextEncoderFiles::fromDiffusersFolder(f.modelDir());
    const auto prompts = manifest.at("prompts").get<std::vector<std::string>>();
    for (const bool quantize : {false, true}) {
      Flux2TextEncoderOptions o;
      o.device = cuda0;
      o.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
      if (quantize) o.quantize = nn::QuantType::Int8;
      const auto whole = Flux2PromptEncoder::load(files, o);
      const auto expected = whole->encode(prompts);
      const size_t layers = whole->model()->layerCount();
      const int64_t before1 = currentAllocatedBytesOn(1);
      splitInTwo(o, layers);
      auto split = Flux2PromptEncoder::load(files, o);
      ASSERT_NE(split->placement(), nullptr);
      EXPECT_TRUE(split->placement()->audit().empty());
      EXPECT_EQ(split->model()->layer(0)->qProj->weight.device(), cuda0);
      EXPECT_EQ(split->model()->layer(layers - 1)->qProj->weight.device(), at::Device(at::kCUDA, 1));
      EXPECT_GT(currentAllocatedBytesOn(1), before1) << "the second half of the layers is on cuda:1";
      const auto e = split->encode(prompts);
      EXPECT_EQ(e.device(), cuda0) << "the embeddings come back on the first card";
      EXPECT_TRUE(test::allClose(e.cpu(), expected.cpu(), 1e-6, 1e-6)) << (quantize ? "int8" : "float32");
      split->release();
      split.reset();
      torch::cuda::synchronize();
      EXPECT_EQ(currentAllocatedBytesOn(1), before1) << "released from cuda:1";
    }
  }
}

TEST(Flux2TextGpu, Qwen3EightBShapeSplitOverTwoCards) {
  STRATA_REQUIRE_CUDA_DEVICES(2);
  std::filesystem::path tokenizer;
  for (const auto& [dir, manifest] : test::fixturesOfKind("flux2_pipeline"))
    if (manifest.value("variant", "") == "klein") tokenizer = dir / "model" / "tokenizer";
  if (tokenizer.empty())
    GTEST_SKIP() << "no klein flux2_pipeline fixture (its tokenizer) under " << test::referenceDir();
  const auto c = flux2RandomTextConfig(Flux2TextEncoderKind::kQwen3, 12288);  // Qwen3-8B, up to layer 27
  Flux2TextEncoderOptions o;
  o.device = at::Device(at::kCUDA, 0);
  o.dtype = at::kBFloat16;
  o.quantize = nn::QuantType::Int8;  // model.quantize_te
  const std::vector<std::string> prompts(4, "a photo of sks person wearing a red hat");
  at::manual_seed(11);
  auto whole = Flux2PromptEncoder::random(tokenizer, Flux2TextEncoderKind::kQwen3, c, o);
  const auto expected = whole->encode(prompts);
  const size_t layers = whole->model()->layerCount();
  whole.reset();
  torch::cuda::synchronize();
  const int64_t base0 = currentAllocatedBytesOn(0), base1 = currentAllocatedBytesOn(1);
  splitInTwo(o, layers);
  at::manual_seed(11);
  auto split = Flux2PromptEncoder::random(tokenizer, Flux2TextEncoderKind::kQwen3, c, o);
  const int64_t on0 = currentAllocatedBytesOn(0) - base0, on1 = currentAllocatedBytesOn(1) - base1;
  std::cout << "[flux2 text gpu] Qwen3-8B int8 split: cuda:0 " << gib(on0) << " GiB (embeddings + " << layers / 2
            << " layers), cuda:1 " << gib(on1) << " GiB (" << layers - layers / 2 << " layers)" << std::endl;
  EXPECT_GT(on1, 0);
  const auto e = split->encode(prompts);
  EXPECT_EQ(e.device(), o.device);
  // The same weights and kernels: the same embeddings, up to what a bf16 kernel may vary.
  EXPECT_LT(relL2(e, expected), 1e-3) << "exactly equal: " << at::equal(e, expected);
  split->release();
  split.reset();
  torch::cuda::synchronize();
  EXPECT_EQ(currentAllocatedBytesOn(1), base1);
}
