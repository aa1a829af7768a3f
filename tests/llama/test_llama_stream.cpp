// The streamed Llama load (streamLlamaForCausalLM): the file checked before anything
// is built, each layer filled and quantized before the next one exists, and the
// same model as build-then-load when nothing is quantized.
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaForCausalLM.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::llama;
namespace fs = std::filesystem;

namespace {

LlamaConfig withBiases() {
  LlamaConfig cfg = LlamaConfig::tiny();
  cfg.qkvBias = true;
  cfg.outputBias = true;
  cfg.mlpBias = true;
  return cfg;
}

// A random model of `cfg` drawn from `seed`, saved in `dir` as transformers saves one.
std::shared_ptr<LlamaForCausalLM> savedRandomModel(uint64_t seed, const LlamaConfig& cfg, const fs::path& dir,
                                                   const LlamaBuildOptions& options = {}, int64_t maxShardBytes = 0) {
  torch::manual_seed(seed);
  auto model = std::make_shared<LlamaForCausalLM>(cfg, options);
  saveLlamaFolder(*model, dir, maxShardBytes);
  return model;
}

}  // namespace

TEST(LlamaStream, ParamShapesAreTheBuiltModelsParametersInOrder) {
  LlamaConfig tied = LlamaConfig::tiny();
  tied.tieWordEmbeddings = true;
  for (const LlamaConfig& cfg : {LlamaConfig::tiny(), withBiases(), tied}) {
    LlamaForCausalLM model(cfg);
    std::vector<std::pair<std::string, std::vector<int64_t>>> built;
    for (const auto& p : model.named_parameters()) built.emplace_back(p.key(), p.value().sizes().vec());
    EXPECT_EQ(llamaParamShapes(cfg), built) << "biases " << cfg.qkvBias << ", tied " << cfg.tieWordEmbeddings;
  }
}

TEST(LlamaStream, UnquantizedStreamEqualsBuildThenLoad) {
  const LlamaConfig cfg = withBiases();
  test::TempDir dir;
  // Shards: layers spread over files.
  savedRandomModel(11, cfg, dir.path(), LlamaBuildOptions{at::kCPU, at::kBFloat16}, /*maxShardBytes=*/6000);
  LlamaForCausalLM loaded(cfg);
  loadLlamaWeights(loaded, dir.path());
  std::vector<std::pair<int64_t, int64_t>> progress;
  LlamaStreamOptions so;
  so.onProgress = [&progress](int64_t done, int64_t total) { progress.emplace_back(done, total); };
  const auto streamed = streamLlamaForCausalLM(openLlamaWeights(dir.path()), cfg, LlamaBuildOptions{}, so);
  auto want = loaded.named_parameters();
  const auto got = streamed->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& p : got) EXPECT_TRUE(at::equal(p.value(), want[p.key()])) << p.key();
  const int64_t units = cfg.numHiddenLayers + 1;
  ASSERT_EQ(progress.size(), static_cast<size_t>(units));
  for (int64_t i = 0; i < units; ++i) EXPECT_EQ(progress[i], std::make_pair(i + 1, units));
}

// Each layer is quantized inside its own build, before the next layer exists: the
// user hook of layer i runs after the quantization and before layer i + 1 is built
// (options.layerDevice is asked for each layer right before it is built).
TEST(LlamaStream, EachLayerIsQuantizedBeforeTheNextIsBuilt) {
  const LlamaConfig cfg = LlamaConfig::tiny();
  test::TempDir dir;
  const auto source = savedRandomModel(12, cfg, dir.path());
  std::vector<std::string> events;
  LlamaBuildOptions bo;
  // Asked right before layer i is built: the order shows each layer quantized before the next exists.
  bo.layerDevice = [&events](size_t i) {
    events.push_back("build " + std::to_string(i));
    return at::Device(at::kCPU);
  };
  bo.onLayerBuilt = [&events](size_t i, torch::nn::Module& layer) {
    int64_t quantized = 0, linears = 0;
    for (const auto& m : layer.modules(/*include_self=*/false))
      if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(m)) {
        ++linears;
        quantized += lin->quantType() == nn::QuantType::Int8;
      }
    events.push_back("layer " + std::to_string(i) + ": " + std::to_string(quantized) + "/" + std::to_string(linears) +
                     " int8");
  };
  LlamaStreamOptions so;
  so.quantize = nn::QuantType::Int8;
  so.onProgress = [&events](int64_t done, int64_t total) {
    events.push_back("progress " + std::to_string(done) + "/" + std::to_string(total));
  };
  const auto model = streamLlamaForCausalLM(openLlamaWeights(dir.path()), cfg, bo, so);
  std::vector<std::string> expected;
  const int64_t n = cfg.numHiddenLayers;
  for (int64_t i = 0; i < n; ++i) {
    expected.push_back("build " + std::to_string(i));
    expected.push_back("layer " + std::to_string(i) + ": 7/7 int8");
    expected.push_back("progress " + std::to_string(i + 1) + "/" + std::to_string(n + 1));
  }
  expected.push_back("progress " + std::to_string(n + 1) + "/" + std::to_string(n + 1));
  EXPECT_EQ(events, expected);

  // The quantized layers compute close to the float source (int8 per row), and the
  // embeddings, norms and head are exact copies.
  at::NoGradGuard g;
  EXPECT_TRUE(at::equal(model->embedTokens->weight, source->embedTokens->weight));
  EXPECT_TRUE(at::equal(model->lmHead->weight, source->lmHead->weight));
  LlamaInputs in;
  in.inputIds = at::randint(0, cfg.vocabSize, {2, 9}, at::kLong);
  const auto want = source->forward(in), got = model->forward(in);
  EXPECT_LT(test::relL2(got, want), 0.05) << "int8 streamed model far from its float source";
  EXPECT_GT(test::relL2(got, want), 0.0) << "the layers were not quantized";
}

TEST(LlamaStream, ABadFileIsRefusedBeforeAnyLayerIsBuilt) {
  const LlamaConfig cfg = LlamaConfig::tiny();
  test::TempDir dir;
  savedRandomModel(13, cfg, dir.path());
  auto tensors = io::loadSafetensors(dir / "model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> bad;
  for (const auto& [k, t] : tensors)
    if (k != "model.layers.2.mlp.gate_proj.weight") bad.emplace_back(k, t);  // the last layer's: missing
  io::writeSafetensors(dir / "model.safetensors", bad);
  int built = 0;
  LlamaBuildOptions bo;
  bo.onLayerBuilt = [&built](size_t, torch::nn::Module&) { ++built; };
  LlamaStreamOptions so;
  so.quantize = nn::QuantType::Int8;
  try {
    streamLlamaForCausalLM(openLlamaWeights(dir.path()), cfg, bo, so);
    ADD_FAILURE() << "a file without model.layers.2.mlp.gate_proj.weight streamed in";
  } catch (const LoadError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find((dir / "model.safetensors").string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing: model.layers.2.mlp.gate_proj.weight [48, 32]"), std::string::npos) << msg;
  }
  EXPECT_EQ(built, 0) << "layers were built before the file was checked";
}

// A tied model (no lm_head) streams from a folder whose file also holds lm_head.weight,
// as transformers sometimes saves one: the copy is skipped, the head is the embedding.
TEST(LlamaStream, ATiedModelSkipsAStoredHeadCopy) {
  LlamaConfig cfg = LlamaConfig::tiny();
  cfg.tieWordEmbeddings = true;
  test::TempDir dir;
  const auto source = savedRandomModel(14, cfg, dir.path());
  auto tensors = io::loadSafetensors(dir / "model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> withHead(tensors.begin(), tensors.end());
  withHead.emplace_back("lm_head.weight", at::zeros_like(tensors.at("model.embed_tokens.weight")));
  io::writeSafetensors(dir / "model.safetensors", withHead);
  const auto model = streamLlamaForCausalLM(openLlamaWeights(dir.path()), cfg, LlamaBuildOptions{});
  EXPECT_FALSE(model->lmHead);
  at::NoGradGuard g;
  LlamaInputs in;
  in.inputIds = at::randint(0, cfg.vocabSize, {1, 6}, at::kLong);
  EXPECT_TRUE(at::equal(model->forward(in), source->forward(in)));
}
