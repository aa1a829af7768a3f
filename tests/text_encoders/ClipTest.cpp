// CLIP text model: config and parameter plan, causal attention and pooling, the
// name forms users' files have (with and without "text_model."), strict loading.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/clip/ClipTextConfig.h"
#include "models/clip/ClipTextModel.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::clip;

namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

Tensors stateDict(ClipTextModel& m, const std::string& prefix = "") {
  Tensors out;
  for (const auto& p : m.named_parameters(true)) out.emplace_back(prefix + p.key(), p.value().detach().clone());
  return out;
}

// Ids whose highest value (the legacy pooling position) sits at `eosAt` in each row.
at::Tensor idsWithEnd(const ClipTextConfig& cfg, int64_t batch, int64_t length, std::vector<int64_t> eosAt) {
  auto ids = at::randint(0, cfg.vocabSize - 1, {batch, length}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) ids[b][eosAt[b]] = cfg.vocabSize - 1;
  return ids;
}

std::string loadErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ClipTextConfig, ClipLParameterCount) {
  // CLIP ViT-L/14's text tower, FLUX.1's text_encoder: 123,060,480 parameters.
  EXPECT_EQ(clipParamPlan(ClipTextConfig::clipL()).totalParams(), 123060480LL);
  EXPECT_EQ(ClipTextConfig::preset("clip-l"), ClipTextConfig::clipL());
  EXPECT_THROW(ClipTextConfig::preset("clip-xl"), ConfigError);
  ClipTextModel model(ClipTextConfig::tiny());
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  EXPECT_EQ(n, clipParamPlan(ClipTextConfig::tiny()).totalParams());
}

TEST(ClipTextConfig, TransformersJsonAndShapes) {
  const auto j = nlohmann::json::parse(R"({"model_type": "clip_text_model", "vocab_size": 100, "hidden_size": 128,
      "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 2, "max_position_embeddings": 16,
      "hidden_act": "gelu", "eos_token_id": 99})");
  const auto c = ClipTextConfig::fromTransformersJson(j);
  EXPECT_EQ(c.hiddenAct, ClipActivation::Gelu);
  EXPECT_FALSE(c.legacyArgmaxPooling());
  EXPECT_EQ(ClipTextConfig::fromTransformersJson(c.toTransformersJson()), c);
  // A full CLIPConfig: the text tower's part is used.
  nlohmann::json full;
  full["model_type"] = "clip";
  full["text_config"] = j;
  EXPECT_EQ(ClipTextConfig::fromTransformersJson(full), c);
  auto bad = j;
  bad["hidden_act"] = "tanh";
  EXPECT_THROW(ClipTextConfig::fromTransformersJson(bad), ConfigError);
  bad = j;
  bad["num_attention_heads"] = 3;
  EXPECT_THROW(ClipTextConfig::fromTransformersJson(bad), ConfigError);
  bad = j;
  bad["model_type"] = "t5";
  EXPECT_THROW(ClipTextConfig::fromTransformersJson(bad), ConfigError);

  // Shapes: heads from CLIP's head width 64; a width without it needs a config.json.
  ClipTextModel m(c);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : m.named_parameters(true)) shapes[p.key()] = p.value().sizes().vec();
  const auto s = ClipTextConfig::fromShapes(shapes);
  EXPECT_EQ(s.numAttentionHeads, 2);
  EXPECT_EQ(s.numHiddenLayers, 3);
  EXPECT_EQ(s.intermediateSize, 256);
  EXPECT_EQ(s.maxPositionEmbeddings, 16);
  ClipTextModel tiny(ClipTextConfig::tiny());
  shapes.clear();
  for (const auto& p : tiny.named_parameters(true)) shapes[p.key()] = p.value().sizes().vec();
  try {
    ClipTextConfig::fromShapes(shapes);
    FAIL() << "hidden 16 has no 64-wide heads";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

TEST(ClipTextModel, CausalAttention) {
  const auto cfg = ClipTextConfig::tiny();
  ClipTextModel model(cfg);
  at::NoGradGuard g;
  auto ids = idsWithEnd(cfg, 1, 8, {7});
  const auto a = model.forward(ids).lastHiddenState;
  ids[0][5] = (ids[0][5].item<int64_t>() + 1) % (cfg.vocabSize - 1);
  const auto b = model.forward(ids).lastHiddenState;
  EXPECT_TRUE(test::allClose(a.narrow(1, 0, 5), b.narrow(1, 0, 5), 0, 0)) << "a later token changed an earlier state";
  EXPECT_FALSE(test::allClose(a.narrow(1, 5, 3), b.narrow(1, 5, 3), 1e-6, 0));
}

TEST(ClipTextModel, PooledPositionFollowsTheEosRule) {
  auto cfg = ClipTextConfig::tiny();
  ClipTextModel model(cfg);
  at::NoGradGuard g;
  // Legacy (eos_token_id 2): the highest id.
  const auto ids = idsWithEnd(cfg, 2, 6, {3, 5});
  auto out = model.forward(ids);
  EXPECT_TRUE(test::allClose(out.pooled[0], out.lastHiddenState[0][3], 0, 0));
  EXPECT_TRUE(test::allClose(out.pooled[1], out.lastHiddenState[1][5], 0, 0));
  // Newer configs: the first position of eos_token_id, whatever its value.
  cfg.eosTokenId = 7;
  ClipTextModel eosModel(cfg);
  auto eosIds = idsWithEnd(cfg, 1, 6, {0});
  eosIds.masked_fill_(eosIds.eq(7), 8);
  eosIds[0][2] = 7;
  eosIds[0][4] = 7;
  const auto positions = eosModel.pooledPositions(eosIds);
  EXPECT_EQ(positions[0].item<int64_t>(), 2);
}

TEST(ClipTextModel, PaddingMaskAndLimits) {
  const auto cfg = ClipTextConfig::tiny();
  ClipTextModel model(cfg);
  at::NoGradGuard g;
  const auto ids = idsWithEnd(cfg, 1, 6, {3});
  // Masking a key that the causal mask already hides changes nothing; masking a visible one does.
  auto tail = at::ones({1, 6}, at::kLong);
  tail[0][5] = 0;
  EXPECT_TRUE(test::allClose(model.forward(ids, tail).lastHiddenState.narrow(1, 0, 5),
                             model.forward(ids).lastHiddenState.narrow(1, 0, 5), 1e-6, 1e-6));
  auto head = at::ones({1, 6}, at::kLong);
  head[0][1] = 0;
  EXPECT_FALSE(test::allClose(model.forward(ids, head).pooled, model.forward(ids).pooled, 1e-6, 0));
  EXPECT_THROW(model.forward(ids, at::ones({1, 5}, at::kLong)), Error);
  EXPECT_THROW(model.forward(at::zeros({1, cfg.maxPositionEmbeddings + 1}, at::kLong)), Error) << "too many tokens";
  EXPECT_THROW(model.forward(at::full({1, 3}, cfg.vocabSize, at::kLong)), Error) << "id outside the vocabulary";
}

TEST(ClipCheckpoint, EveryNameFormLoadsToTheSameNumbers) {
  const auto cfg = ClipTextConfig::tiny();
  ClipTextModel src(cfg);
  const auto ids = idsWithEnd(cfg, 2, 7, {6, 4});
  at::NoGradGuard g;
  const auto expected = src.forward(ids);
  test::TempDir dir;

  // transformers 5 (no prefix), transformers 4 / ComfyUI (text_model. + the old
  // position_ids buffer + the full model's heads), a checkpoint-style longer prefix.
  io::writeSafetensors(dir / "v5.safetensors", stateDict(src));
  auto v4 = stateDict(src, "text_model.");
  v4.emplace_back("text_model.embeddings.position_ids", at::arange(cfg.maxPositionEmbeddings).unsqueeze(0));
  v4.emplace_back("text_projection.weight", at::zeros({cfg.hiddenSize, cfg.hiddenSize}));
  v4.emplace_back("logit_scale", at::zeros({}));
  io::writeSafetensors(dir / "clip_l.safetensors", v4);
  io::writeSafetensors(dir / "long.safetensors", stateDict(src, "cond_stage_model.transformer.text_model."));

  for (const char* name : {"v5.safetensors", "clip_l.safetensors", "long.safetensors"}) {
    const auto ckpt = ClipCheckpoint::open(dir / name);
    ClipTextModel model(cfg);
    const auto ignored = loadClipTextWeights(model, ckpt);
    EXPECT_EQ(ignored.size(), std::string(name) == "clip_l.safetensors" ? 3u : 0u) << name;
    const auto out = model.forward(ids);
    EXPECT_TRUE(test::allClose(out.lastHiddenState, expected.lastHiddenState, 0, 0)) << name;
    EXPECT_TRUE(test::allClose(out.pooled, expected.pooled, 0, 0)) << name;
  }
  EXPECT_EQ(ClipCheckpoint::open(dir / "clip_l.safetensors").prefix(), "text_model.");

  // A diffusers pipeline root: text_encoder/ with config.json (heads from there).
  const auto root = dir.path() / "pipeline";
  fs::create_directories(root / "text_encoder");
  io::writeSafetensors(root / "text_encoder" / "model.safetensors", stateDict(src, "text_model."));
  std::ofstream(root / "text_encoder" / "config.json") << cfg.toTransformersJson().dump();
  std::ofstream(root / "model_index.json") << R"({"text_encoder": ["transformers", "CLIPTextModel"],
      "text_encoder_2": ["transformers", "T5EncoderModel"]})";
  auto model = loadClipTextModel(root);
  EXPECT_EQ(model->config(), cfg);
  EXPECT_TRUE(test::allClose(model->forward(ids).pooled, expected.pooled, 0, 0));
  // A single file of a width without 64-wide heads needs the config given.
  EXPECT_THROW(loadClipTextModel(dir / "v5.safetensors"), LoadError);
  EXPECT_TRUE(
      test::allClose(loadClipTextModel(dir / "v5.safetensors", {}, cfg)->forward(ids).pooled, expected.pooled, 0, 0));
}

TEST(ClipCheckpoint, StrictListsEveryProblemNamesTheFileAndLoadsNothing) {
  const auto cfg = ClipTextConfig::tiny();
  ClipTextModel src(cfg);
  Tensors broken;
  for (auto& [k, t] : stateDict(src, "text_model.")) {
    if (k == "text_model.encoder.layers.1.mlp.fc2.bias") continue;                        // missing
    if (k == "text_model.embeddings.position_embedding.weight") t = at::zeros({77, 16});  // mis-shaped
    broken.emplace_back(k, t);
  }
  broken.emplace_back("text_model.encoder.layers.2.mlp.fc1.weight", at::zeros({32, 16}));  // a third layer
  broken.emplace_back("vision_model.post_layernorm.weight", at::zeros({16}));              // the full CLIP
  test::TempDir dir;
  io::writeSafetensors(dir / "clip_l.safetensors", broken);

  ClipTextModel target(cfg);
  const auto before = target.tokenEmbedding.clone();
  const auto msg = loadErrorOf([&] { loadClipTextWeights(target, ClipCheckpoint::open(dir / "clip_l.safetensors")); });
  EXPECT_NE(msg.find("clip_l.safetensors (CLIP text encoder, transformers names under 'text_model.'): 4 problem(s), "
                     "nothing loaded"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("missing: text_model.encoder.layers.1.mlp.fc2.bias [16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: text_model.embeddings.position_embedding.weight expected [12, 16], got [77, 16]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected: text_model.encoder.layers.2.mlp.fc1.weight [32, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: vision_model.post_layernorm.weight [16]"), std::string::npos) << msg;
  EXPECT_TRUE(test::allClose(target.tokenEmbedding, before, 0, 0)) << "nothing may load partially";

  io::writeSafetensors(dir / "t5.safetensors", Tensors{{"encoder.final_layer_norm.weight", at::ones({4})}});
  EXPECT_NE(loadErrorOf([&] { ClipCheckpoint::open(dir / "t5.safetensors"); }).find("not a CLIP text encoder"),
            std::string::npos);
}

TEST(ClipCheckpoint, ConvertsDtype) {
  const auto cfg = ClipTextConfig::tiny();
  ClipTextModel src(cfg);
  Tensors half;
  for (auto& [k, t] : stateDict(src)) half.emplace_back(k, t.to(at::kHalf));
  test::TempDir dir;
  io::writeSafetensors(dir / "clip_fp16.safetensors", half);
  ClipBuildOptions bf16;
  bf16.dtype = at::kBFloat16;
  auto model = loadClipTextModel(dir / "clip_fp16.safetensors", bf16, cfg);
  EXPECT_EQ(model->dtype(), at::kBFloat16);
  auto f32 = loadClipTextModel(dir / "clip_fp16.safetensors", {}, cfg);
  EXPECT_TRUE(test::allClose(f32->tokenEmbedding, src.tokenEmbedding.to(at::kHalf).to(at::kFloat), 0, 0));
}
