// FLUX.2's text encoders on CUDA (label gpu; skips without a device): every
// flux2_pipeline fixture's ids, hidden states, prompt embeddings and empty-prompt
// embeddings in float32 on the card, against the reference; then the klein-9B
// text encoder's shape (Qwen3-8B up to layer 27) with random bf16 weights encoding
// 512-token prompts, printing prompts/s and the peak memory. No timing assertion.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <chrono>
#include <iostream>

#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "gpu/GpuStats.h"
#include "models/llama/LlamaForCausalLM.h"
#include "parity/Flux2PipelineFixture.h"

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
