// T5 encoder: config and parameter plan, relative position buckets, the name
// forms users' files have, strict loading errors, masks and dtypes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/t5/T5Checkpoint.h"
#include "models/t5/T5Config.h"
#include "models/t5/T5Encoder.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::t5;

namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

Tensors stateDict(T5Encoder& m, const std::string& prefix = "") {
  Tensors out;
  for (const auto& p : m.named_parameters(true)) out.emplace_back(prefix + p.key(), p.value().detach().clone());
  return out;
}

at::Tensor someIds(const T5Config& cfg, int64_t batch = 2, int64_t length = 7) {
  return at::randint(0, cfg.vocabSize, {batch, length}, at::kLong);
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

TEST(T5Config, XxlParameterCountFromTheDescriptionAlone) {
  // T5 v1.1 XXL encoder as FLUX.1 ships it: 4,762,310,656 parameters (transformers'
  // T5EncoderModel.num_parameters() for google/t5-v1_1-xxl). Nothing is built.
  const auto plan = t5ParamPlan(T5Config::t5Xxl());
  EXPECT_EQ(plan.totalParams(), 4762310656LL);
  EXPECT_EQ(plan.blocks.size(), 24u);
  EXPECT_EQ(plan.stem.paramCount, 32128LL * 4096);
  EXPECT_EQ(plan.blocks[0].paramCount - plan.blocks[1].paramCount, 32 * 64) << "only block 0 holds the bias table";
  EXPECT_EQ(T5Config::preset("t5-xxl"), T5Config::t5Xxl());
  EXPECT_THROW(T5Config::preset("t5-huge"), ConfigError);
}

TEST(T5Config, PlanEqualsTheBuiltModelPerBlock) {
  for (bool gated : {true, false}) {
    auto cfg = T5Config::tiny();
    cfg.gatedAct = gated;
    T5Encoder model(cfg);
    const auto plan = t5ParamPlan(cfg);
    const auto list = model.blockList();
    ASSERT_EQ(list.blocks.size(), plan.blocks.size());
    for (size_t i = 0; i < plan.blocks.size(); ++i) {
      int64_t n = 0;
      for (const auto& p : list.blocks[i].block->parameters()) n += p.numel();
      EXPECT_EQ(n, plan.blocks[i].paramCount) << plan.blocks[i].id;
      EXPECT_EQ(list.blocks[i].id, plan.blocks[i].id);
    }
    int64_t total = 0;
    for (const auto& p : model.parameters()) total += p.numel();
    EXPECT_EQ(total, plan.totalParams());
  }
}

TEST(T5Config, TransformersJson) {
  const auto j = nlohmann::json::parse(R"({"model_type": "t5", "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
      "num_heads": 4, "vocab_size": 96, "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new",
      "relative_attention_max_distance": 64})");
  const auto c = T5Config::fromTransformersJson(j);
  EXPECT_TRUE(c.gatedAct);
  EXPECT_EQ(c.activation, T5Activation::GeluTanh);
  EXPECT_EQ(c.relativeAttentionMaxDistance, 64);
  EXPECT_EQ(c.relativeAttentionNumBuckets, 32) << "transformers' default";
  EXPECT_EQ(T5Config::fromTransformersJson(c.toTransformersJson()), c);
  // v1.0 T5: "relu", one wi.
  auto v10 = j;
  v10["feed_forward_proj"] = "relu";
  EXPECT_FALSE(T5Config::fromTransformersJson(v10).gatedAct);
  EXPECT_EQ(T5Config::fromTransformersJson(v10).activation, T5Activation::Relu);
  auto silu = j;
  silu["feed_forward_proj"] = "gated-silu";
  EXPECT_EQ(T5Config::fromTransformersJson(silu).activation, T5Activation::Silu);
  for (const char* bad : {"gatedgelu-x-y", "ungated-gelu", "gated-tanh"}) {
    auto b = j;
    b["feed_forward_proj"] = bad;
    EXPECT_THROW(T5Config::fromTransformersJson(b), ConfigError) << bad;
  }
  auto other = j;
  other["model_type"] = "mt5";
  EXPECT_THROW(T5Config::fromTransformersJson(other), ConfigError);
  auto wrongType = j;
  wrongType["d_model"] = "wide";
  EXPECT_THROW(T5Config::fromTransformersJson(wrongType), ConfigError);
}

TEST(T5Encoder, RelativePositionBuckets) {
  // Bidirectional, 32 buckets, max distance 128: 16 per sign, exact below 8,
  // then 8 + floor(log(d / 8) / log(16) * 8), capped at 15; keys after the query +16.
  const auto rel = at::tensor(std::vector<int64_t>{0, -1, -7, -8, -12, -16, -127, -128, -1000, 1, 7, 16, 200});
  const auto got = relativePositionBucket(rel, 32, 128);
  const std::vector<int64_t> expected{0, 1, 7, 8, 9, 10, 15, 15, 15, 17, 23, 26, 31};
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(got[i].item<int64_t>(), expected[i]) << "relative position " << rel[i].item<int64_t>();
}

TEST(T5Encoder, NamesAreTransformersAndOnlyBlockZeroHoldsTheBiasTable) {
  T5Encoder model(T5Config::tiny());
  std::set<std::string> names;
  for (const auto& p : model.named_parameters(true)) names.insert(p.key());
  for (const char* key :
       {"shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight",
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi_0.weight", "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
        "encoder.block.1.layer.1.DenseReluDense.wo.weight", "encoder.block.1.layer.1.layer_norm.weight",
        "encoder.final_layer_norm.weight"})
    EXPECT_TRUE(names.count(key)) << key;
  EXPECT_FALSE(names.count("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"));
  EXPECT_FALSE(model.block(1)->hasRelativeAttentionBias());
  EXPECT_THROW(model.block(1)->positionBias(4), Error);
}

TEST(T5Encoder, EveryNameFormLoadsToTheSameNumbers) {
  const auto cfg = T5Config::tiny();
  T5Encoder src(cfg);
  const auto ids = someIds(cfg);
  at::NoGradGuard g;
  const auto expected = src.forward(ids);
  test::TempDir dir;

  // transformers' own file (shared.weight), and with encoder.embed_tokens.weight instead.
  const auto sd = stateDict(src);
  io::writeSafetensors(dir / "t5.safetensors", sd);
  Tensors embedTokens;
  for (const auto& [k, t] : sd) embedTokens.emplace_back(k == "shared.weight" ? "encoder.embed_tokens.weight" : k, t);
  io::writeSafetensors(dir / "embed_tokens.safetensors", embedTokens);
  // Both (the tied pair as a full state dict has it), and under a ComfyUI-style prefix.
  auto both = sd;
  both.emplace_back("encoder.embed_tokens.weight", src.shared.detach().clone());
  io::writeSafetensors(dir / "both.safetensors", both);
  io::writeSafetensors(dir / "prefixed.safetensors", stateDict(src, "text_encoders.t5xxl.transformer."));

  for (const char* name : {"t5.safetensors", "embed_tokens.safetensors", "both.safetensors", "prefixed.safetensors"}) {
    const auto ckpt = T5Checkpoint::open(dir / name);
    // A single file has no config: shapes give all but the max distance (T5's 128).
    auto detected = ckpt.config();
    EXPECT_EQ(detected.relativeAttentionMaxDistance, 128) << name;
    detected.relativeAttentionMaxDistance = cfg.relativeAttentionMaxDistance;
    EXPECT_EQ(detected, cfg) << name;
    T5Encoder model(cfg);
    const auto ignored = loadT5Weights(model, ckpt);
    EXPECT_EQ(ignored.size(), std::string(name) == "both.safetensors" ? 1u : 0u) << name;
    EXPECT_TRUE(test::allClose(model.forward(ids), expected, 0, 0)) << name;
  }
  EXPECT_EQ(T5Checkpoint::open(dir / "prefixed.safetensors").prefix(), "text_encoders.t5xxl.transformer.");

  // A diffusers pipeline root with a sharded text_encoder_2/ (index JSON, config.json).
  const auto root = dir.path() / "pipeline";
  const auto folder = root / "text_encoder_2";
  fs::create_directories(folder);
  const size_t half = sd.size() / 2;
  Tensors a(sd.begin(), sd.begin() + half), b(sd.begin() + half, sd.end());
  io::writeSafetensors(folder / "model-00001-of-00002.safetensors", a);
  io::writeSafetensors(folder / "model-00002-of-00002.safetensors", b);
  nlohmann::json index;
  for (const auto& [k, _] : a) index["weight_map"][k] = "model-00001-of-00002.safetensors";
  for (const auto& [k, _] : b) index["weight_map"][k] = "model-00002-of-00002.safetensors";
  std::ofstream(folder / "model.safetensors.index.json") << index.dump();
  std::ofstream(folder / "config.json") << cfg.toTransformersJson().dump();
  std::ofstream(root / "model_index.json") << R"({"_class_name": "FluxPipeline",
      "text_encoder_2": ["transformers", "T5EncoderModel"]})";
  for (const auto& path : {root, folder}) {
    auto model = loadT5Encoder(path);
    EXPECT_EQ(model->config(), cfg);
    EXPECT_TRUE(test::allClose(model->forward(ids), expected, 0, 0)) << path;
  }
  EXPECT_EQ(T5Checkpoint::open(root).files().files().size(), 2u);
}

TEST(T5Checkpoint, StrictListsEveryProblemNamesTheFileAndLoadsNothing) {
  const auto cfg = T5Config::tiny();
  T5Encoder src(cfg);
  Tensors broken;
  for (auto& [k, t] : stateDict(src)) {
    if (k == "encoder.block.1.layer.0.SelfAttention.k.weight") continue;                   // missing
    if (k == "encoder.block.0.layer.1.DenseReluDense.wo.weight") t = at::zeros({16, 31});  // mis-shaped
    broken.emplace_back(k, t);
  }
  broken.emplace_back("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight", at::zeros({8, 4}));
  broken.emplace_back("decoder.final_layer_norm.weight", at::zeros({16}));  // unexpected (a full T5)
  test::TempDir dir;
  io::writeSafetensors(dir / "t5xxl_fp16.safetensors", broken);

  T5Encoder target(cfg);
  const auto before = target.shared.clone();
  const auto msg = loadErrorOf([&] { loadT5Weights(target, T5Checkpoint::open(dir / "t5xxl_fp16.safetensors")); });
  EXPECT_NE(msg.find("t5xxl_fp16.safetensors (T5 encoder, transformers names): 4 problem(s), nothing loaded"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("missing: encoder.block.1.layer.0.SelfAttention.k.weight [16, 16]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: encoder.block.0.layer.1.DenseReluDense.wo.weight expected [16, 32], got [16, 31]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected: encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight [8, 4]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("unexpected: decoder.final_layer_norm.weight [16]"), std::string::npos) << msg;
  EXPECT_TRUE(test::allClose(target.shared, before, 0, 0)) << "nothing may load partially";

  // Under a prefix the message says so and names the stored keys.
  Tensors prefixed;
  for (auto& [k, t] : stateDict(src, "te.")) prefixed.emplace_back(k, t);
  prefixed.emplace_back("vae.decoder.conv_in.weight", at::zeros({2}));
  io::writeSafetensors(dir / "prefixed.safetensors", prefixed);
  const auto msg2 = loadErrorOf([&] { loadT5Encoder(dir / "prefixed.safetensors"); });
  EXPECT_NE(msg2.find("under 'te.'"), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("unexpected: vae.decoder.conv_in.weight [2]"), std::string::npos) << msg2;

  // Not a T5 file at all; no embedding; a tied copy of another shape.
  io::writeSafetensors(dir / "clip.safetensors", Tensors{{"final_layer_norm.weight", at::ones({4})}});
  EXPECT_NE(loadErrorOf([&] { T5Checkpoint::open(dir / "clip.safetensors"); }).find("not a T5 encoder checkpoint"),
            std::string::npos);
  Tensors noEmbed;
  for (auto& [k, t] : stateDict(src))
    if (k != "shared.weight") noEmbed.emplace_back(k, t);
  io::writeSafetensors(dir / "noembed.safetensors", noEmbed);
  EXPECT_NE(loadErrorOf([&] { T5Checkpoint::open(dir / "noembed.safetensors"); }).find("no token embedding"),
            std::string::npos);
  auto badCopy = stateDict(src);
  badCopy.emplace_back("encoder.embed_tokens.weight", at::zeros({3, 16}));
  io::writeSafetensors(dir / "badcopy.safetensors", badCopy);
  EXPECT_NE(loadErrorOf([&] {
              loadT5Encoder(dir / "badcopy.safetensors");
            }).find("unexpected: encoder.embed_tokens.weight [3, 16]"),
            std::string::npos);
}

TEST(T5Checkpoint, ConvertsDtypePerModel) {
  const auto cfg = T5Config::tiny();
  T5Encoder src(cfg);
  Tensors half;
  for (auto& [k, t] : stateDict(src)) half.emplace_back(k, t.to(at::kHalf));
  test::TempDir dir;
  io::writeSafetensors(dir / "t5xxl_fp16.safetensors", half);
  // fp16 file -> fp32 model and -> bf16 model.
  auto f32 = loadT5Encoder(dir / "t5xxl_fp16.safetensors");
  EXPECT_EQ(f32->dtype(), at::kFloat);
  EXPECT_TRUE(test::allClose(f32->shared, src.shared.to(at::kHalf).to(at::kFloat), 0, 0));
  T5BuildOptions bf16;
  bf16.dtype = at::kBFloat16;
  auto b = loadT5Encoder(dir / "t5xxl_fp16.safetensors", bf16);
  EXPECT_EQ(b->dtype(), at::kBFloat16);
  at::NoGradGuard g;
  const auto ids = someIds(cfg);
  EXPECT_EQ(b->forward(ids).scalar_type(), at::kBFloat16);
  EXPECT_TRUE(test::allClose(b->forward(ids).to(at::kFloat), f32->forward(ids), 0.1, 0.1));
}

TEST(T5Encoder, HalfKeepsTheFeedForwardOutputInFloat32) {
  T5BuildOptions half;
  half.dtype = at::kHalf;
  T5Encoder model(T5Config::tiny(), half);
  EXPECT_EQ(model.block(0)->wo->weight.scalar_type(), at::kFloat);
  EXPECT_EQ(model.block(0)->wi0->weight.scalar_type(), at::kHalf);
  EXPECT_EQ(model.dtype(), at::kHalf);
}

TEST(T5Encoder, PaddingMaskEqualsTheShorterSequence) {
  // Relative positions between real tokens do not change when padding follows
  // them, so masked padding must give exactly the unpadded states.
  const auto cfg = T5Config::tiny();
  T5Encoder model(cfg);
  at::NoGradGuard g;
  const auto ids = someIds(cfg, 1, 5);
  const auto padded = at::cat({ids, at::zeros({1, 3}, at::kLong)}, 1);
  auto mask = at::ones({1, 8}, at::kLong);
  mask.narrow(1, 5, 3).zero_();
  const auto shortOut = model.forward(ids);
  const auto paddedOut = model.forward(padded, mask).narrow(1, 0, 5);
  EXPECT_TRUE(test::allClose(paddedOut, shortOut, 1e-5, 1e-5));
  // Without the mask the padding is attended to and the states differ.
  EXPECT_FALSE(test::allClose(model.forward(padded).narrow(1, 0, 5), shortOut, 1e-5, 1e-5));
  EXPECT_THROW(model.forward(padded, at::ones({1, 7}, at::kLong)), Error);
}

TEST(T5Encoder, RefusesBadIds) {
  const auto cfg = T5Config::tiny();
  T5Encoder model(cfg);
  at::NoGradGuard g;
  EXPECT_THROW(model.forward(at::full({1, 3}, cfg.vocabSize, at::kLong)), Error);
  EXPECT_THROW(model.forward(at::full({1, 3}, -1, at::kLong)), Error);
  EXPECT_THROW(model.forward(at::zeros({1, 3})), Error) << "float ids";
  EXPECT_THROW(model.forward(at::zeros({3}, at::kLong)), Error) << "1-d ids";
  // int32 ids work like int64.
  const auto ids = someIds(cfg);
  EXPECT_TRUE(test::allClose(model.forward(ids.to(at::kInt)), model.forward(ids), 0, 0));
}

TEST(T5Encoder, BlockRunnerPathEqualsForward) {
  const auto cfg = T5Config::tiny();
  T5Encoder model(cfg);
  at::NoGradGuard g;
  const auto ids = someIds(cfg);
  auto io = model.stem(ids);
  const auto list = model.blockList();
  for (const auto& slot : list.blocks) io = slot.block->forward(io);
  EXPECT_TRUE(test::allClose(model.head(io), model.forward(ids), 0, 0));
  EXPECT_EQ(list.stem.modules.at(0).path, "shared");
  EXPECT_EQ(list.head.modules.at(0).path, "encoder.final_layer_norm");
}
