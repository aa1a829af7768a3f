// The Llama model on CPU: module names = checkpoint keys = the param plan, GQA
// shapes and semantics, tied embeddings, the causal and padding mask, strict
// loading (missing / unexpected / mis-shaped keys named with the file, nothing
// partial, dtype converted), sharded folders.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <fstream>
#include <set>

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

LlamaInputs idsOnly(const at::Tensor& ids) {
  LlamaInputs in;
  in.inputIds = ids;
  return in;
}

std::string loadError(LlamaForCausalLM& model, const fs::path& path) {
  try {
    loadLlamaWeights(model, path);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(LlamaModel, NamedParametersArePlanAndCheckpointKeys) {
  const LlamaConfig cfg = LlamaConfig::tiny();
  LlamaForCausalLM model(cfg);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : model.named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(shapes.at("model.layers.2.self_attn.q_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.2.self_attn.k_proj.weight"), (std::vector<int64_t>{16, 32}));  // GQA: 2 kv heads
  EXPECT_EQ(shapes.at("model.layers.2.self_attn.v_proj.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shapes.at("model.layers.2.self_attn.o_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(shapes.at("model.norm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{96, 32}));
  EXPECT_FALSE(shapes.count("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(model.named_buffers().size(), 1u);  // model.rotary_emb.inv_freq, not a checkpoint key

  // The plan counts exactly these, per placement unit.
  const LlamaParamPlan plan = llamaParamPlan(cfg);
  int64_t total = 0;
  for (const auto& p : model.parameters()) total += p.numel();
  EXPECT_EQ(plan.totalParams(), total);
  const nn::BlockList list = model.blockList();
  ASSERT_EQ(list.blocks.size(), plan.blocks.size());
  for (size_t i = 0; i < list.blocks.size(); ++i) {
    EXPECT_EQ(list.blocks[i].id, plan.blocks[i].id);
    int64_t n = 0;
    for (const auto& p : list.blocks[i].block->parameters()) n += p.numel();
    EXPECT_EQ(n, plan.blocks[i].paramCount) << list.blocks[i].id;
  }
  std::set<std::string> planLinears, modelLinears;
  for (const auto& u : plan.blocks)
    for (const auto& l : u.linears) planLinears.insert(l.path);
  for (const auto& l : plan.head.linears) planLinears.insert(l.path);
  for (const auto& [path, _] : model.linears()) modelLinears.insert(path);
  EXPECT_EQ(planLinears, modelLinears);
}

TEST(LlamaModel, BiasesOfQwen2AndLlamaAttentionBias) {
  LlamaConfig cfg = LlamaConfig::tiny();
  cfg.modelType = "qwen2";
  cfg.qkvBias = true;
  LlamaForCausalLM qwen(cfg);
  const auto names = qwen.named_parameters();
  EXPECT_TRUE(names.contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(names.contains("model.layers.0.self_attn.v_proj.bias"));
  EXPECT_FALSE(names.contains("model.layers.0.self_attn.o_proj.bias"));
  int64_t total = 0;
  for (const auto& p : qwen.parameters()) total += p.numel();
  EXPECT_EQ(llamaParamPlan(cfg).totalParams(), total);
}

TEST(LlamaModel, GroupedQueryAttentionEqualsMultiHeadWithRepeatedKvHeads) {
  torch::manual_seed(1);
  const LlamaConfig gqaCfg = LlamaConfig::tiny();  // 4 heads, 2 kv heads
  LlamaConfig mhaCfg = gqaCfg;
  mhaCfg.numKeyValueHeads = 4;
  LlamaForCausalLM gqa(gqaCfg), mha(mhaCfg);
  {
    at::NoGradGuard g;
    auto target = mha.named_parameters();
    for (const auto& p : gqa.named_parameters()) {
      at::Tensor src = p.value();
      const std::string& k = p.key();
      if (k.find("k_proj") != std::string::npos || k.find("v_proj") != std::string::npos) {
        // [Hkv * Dh, D] -> each kv head repeated for its 2 query heads: [H * Dh, D]
        src = src.view({2, 1, 8, 32}).expand({2, 2, 8, 32}).reshape({32, 32});
      }
      target[k].copy_(src);
    }
  }
  const auto ids = at::randint(0, 96, {2, 7}, at::kLong);
  at::NoGradGuard g;
  EXPECT_TRUE(test::allClose(gqa.forward(idsOnly(ids)), mha.forward(idsOnly(ids)), 1e-5, 1e-5));
}

TEST(LlamaModel, CausalAndLeftPaddingMask) {
  torch::manual_seed(2);
  LlamaForCausalLM model(LlamaConfig::tiny());
  at::NoGradGuard g;
  const auto ids = at::randint(1, 96, {1, 6}, at::kLong);
  const auto full = model.forward(idsOnly(ids));
  // Causal: a later token changes no earlier logit.
  auto changed = ids.clone();
  changed[0][5] = (ids[0][5].item<int64_t>() % 95) + 1;
  const auto other = model.forward(idsOnly(changed));
  EXPECT_TRUE(at::allclose(full.narrow(1, 0, 5), other.narrow(1, 0, 5)));
  EXPECT_FALSE(at::allclose(full.narrow(1, 5, 1), other.narrow(1, 5, 1)));
  // Left padding with the mask and positions counted from the first token equals the row alone.
  LlamaInputs padded;
  padded.inputIds = at::cat({at::zeros({1, 3}, at::kLong), ids}, 1);
  padded.attentionMask = at::cat({at::zeros({1, 3}, at::kLong), at::ones({1, 6}, at::kLong)}, 1);
  padded.positionIds = at::cat({at::zeros({1, 3}, at::kLong), at::arange(6, at::kLong).unsqueeze(0)}, 1);
  const auto out = model.forward(padded);
  EXPECT_TRUE(test::allClose(out.narrow(1, 3, 6), full, 1e-5, 1e-5));
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());  // pad rows see nothing, yet stay finite
  // A token outside the vocabulary is refused before the lookup.
  EXPECT_THROW(model.forward(idsOnly(at::full({1, 2}, 96, at::kLong))), Error);
}

TEST(LlamaModel, SlidingWindowHidesOldKeys) {
  const auto m = causalMask(at::Tensor(), 1, 5, at::kFloat, at::kCPU, 2);  // [1, 1, 5, 5]
  const auto seen = m[0][0].eq(0);
  EXPECT_TRUE(seen[4][4].item<bool>());
  EXPECT_TRUE(seen[4][3].item<bool>());
  EXPECT_FALSE(seen[4][2].item<bool>());  // 2 back: outside a window of 2
  EXPECT_FALSE(seen[1][2].item<bool>());  // the future
}

TEST(LlamaModel, TiedEmbeddings) {
  torch::manual_seed(3);
  LlamaConfig cfg = LlamaConfig::tiny();
  cfg.tieWordEmbeddings = true;
  LlamaForCausalLM model(cfg);
  EXPECT_FALSE(model.named_parameters().contains("lm_head.weight"));
  EXPECT_FALSE(model.lmHead);
  EXPECT_EQ(llamaParamPlan(cfg).head.paramCount, cfg.hiddenSize);  // the table counts once, in the stem
  const auto ids = at::randint(0, 96, {2, 5}, at::kLong);
  at::NoGradGuard g;
  // The head multiplies by the embedding table.
  const nn::BlockIO io = model.stem(idsOnly(ids));
  nn::BlockIO x = io;
  for (size_t i = 0; i < model.layerCount(); ++i) x = model.layer(i)->forward(x);
  const auto expected = at::matmul(model.norm->forward(x.img), model.embedTokens->weight.t());
  EXPECT_TRUE(test::allClose(model.forward(idsOnly(ids)), expected, 1e-6, 1e-6));

  // Saved without lm_head (as transformers saves a tied model) and loaded back.
  test::TempDir dir;
  saveLlamaFolder(model, dir.path());
  const auto back = loadLlamaForCausalLM(dir.path());
  EXPECT_TRUE(back->config().tieWordEmbeddings);
  EXPECT_TRUE(at::equal(back->forward(idsOnly(ids)), model.forward(idsOnly(ids))));
  // A tied folder that also stores lm_head.weight loads too (transformers ignores it).
  auto tensors = io::loadSafetensors(dir / "model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> withHead(tensors.begin(), tensors.end());
  withHead.emplace_back("lm_head.weight", tensors.at("model.embed_tokens.weight").clone());
  io::writeSafetensors(dir / "model.safetensors", withHead);
  EXPECT_NO_THROW(loadLlamaForCausalLM(dir.path()));
}

TEST(LlamaModel, StrictLoadNamesEveryProblemAndLoadsNothing) {
  torch::manual_seed(4);
  const LlamaConfig cfg = LlamaConfig::tiny();
  LlamaForCausalLM source(cfg);
  test::TempDir dir;
  saveLlamaFolder(source, dir.path());
  auto tensors = io::loadSafetensors(dir / "model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> bad;
  for (const auto& [k, t] : tensors) {
    if (k == "model.layers.1.mlp.up_proj.weight") continue;  // missing
    if (k == "model.layers.0.self_attn.k_proj.weight") {
      bad.emplace_back(k, at::zeros({32, 32}));  // mis-shaped: MHA weights into a GQA model
      continue;
    }
    bad.emplace_back(k, t);
  }
  bad.emplace_back("model.layers.0.self_attn.q_norm.weight", at::ones({8}));  // unexpected (a Qwen3 key)
  io::writeSafetensors(dir / "model.safetensors", bad);

  LlamaForCausalLM target(cfg);
  const auto before = target.embedTokens->weight.clone();
  const std::string msg = loadError(target, dir.path());
  EXPECT_NE(msg.find((dir / "model.safetensors").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 problem(s), nothing loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: model.layers.1.mlp.up_proj.weight [48, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: model.layers.0.self_attn.k_proj.weight expected [16, 32], got [32, 32]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected: model.layers.0.self_attn.q_norm.weight [8]"), std::string::npos) << msg;
  EXPECT_TRUE(at::equal(target.embedTokens->weight, before)) << "a failed load changed the model";

  // Integer weights are refused; rotary_emb.inv_freq of older saves is skipped.
  std::vector<std::pair<std::string, at::Tensor>> ints(tensors.begin(), tensors.end());
  for (auto& [k, t] : ints)
    if (k == "model.norm.weight") t = at::ones({32}, at::kInt);
  ints.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({4}));
  io::writeSafetensors(dir / "model.safetensors", ints);
  EXPECT_NE(loadError(target, dir.path()).find("not floating point: model.norm.weight"), std::string::npos);
}

TEST(LlamaModel, LoadConvertsTheDtypeAndReadsShards) {
  torch::manual_seed(5);
  LlamaConfig cfg = LlamaConfig::tiny();
  LlamaForCausalLM source(cfg, LlamaBuildOptions{at::kCPU, at::kBFloat16});
  test::TempDir dir;
  saveLlamaFolder(source, dir.path(), /*maxShardBytes=*/8000);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  const auto weights = openLlamaWeights(dir.path());
  EXPECT_GT(weights.files().size(), 2u);
  const auto model = loadLlamaForCausalLM(dir.path());  // float32 model from bf16 shards
  EXPECT_EQ(model->dtype(), at::kFloat);
  for (const auto& p : source.named_parameters())
    EXPECT_TRUE(at::equal(model->named_parameters()[p.key()], p.value().to(at::kFloat))) << p.key();
  // An index that names a shard that is not there.
  std::ofstream(dir / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"model.norm.weight": "model-00009-of-00009.safetensors"}})";
  EXPECT_THROW(openLlamaWeights(dir.path()), LoadError);
}

// A quantized Linear's "weight" is 1-byte storage without its scale: saveLlamaFolder
// refuses, naming the Linear, and writes nothing (not even config.json).
TEST(LlamaModel, SaveRefusesAQuantizedModelNamingTheLinear) {
  LlamaForCausalLM model(LlamaConfig::tiny());
  nn::quantizeLinears(*model.layer(1), nn::QuantType::Int8);
  test::TempDir dir;
  const auto folder = dir / "out";
  try {
    saveLlamaFolder(model, folder);
    ADD_FAILURE() << "saveLlamaFolder wrote a quantized model";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("saveLlamaFolder: the Linear 'model.layers.1.self_attn.q_proj' is quantized (int8)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("write the float base"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(folder));
}

TEST(LlamaModel, FolderWithoutSafetensorsSaysSo) {
  test::TempDir dir;
  std::ofstream(dir / "pytorch_model.bin") << "pickle";
  try {
    openLlamaWeights(dir.path());
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos) << e.what();
  }
}

TEST(LlamaModel, LossIsShiftedAndIgnoresMinus100) {
  const auto logits = at::randn({1, 4, 5});
  const auto labels = at::tensor({-100, 2, -100, 4}, at::kLong).view({1, 4});
  // Positions 0 and 2 predict tokens 1 and 3 (labels 2 and 4); position 3 predicts nothing.
  const auto lp = at::log_softmax(logits[0], -1);
  const double expected = -(lp[0][2].item<double>() + lp[2][4].item<double>()) / 2;
  EXPECT_NEAR(causalLmLoss(logits, labels).item<double>(), expected, 1e-6);
}
