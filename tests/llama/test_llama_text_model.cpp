// FLUX.2's text encoders on the Llama family: Qwen3 (q/k RMSNorm over head_dim
// before the rotation, head_dim independent of hidden_size), the language model
// of Mistral3ForConditionalGeneration (text_config; both key layouts, the vision
// tower skipped by name), the hidden states of a model built only up to the layer
// they need, and padded query rows that see no key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaConfig.h"
#include "models/llama/LlamaForCausalLM.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::llama;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json qwen3Json() {
  return json{{"model_type", "qwen3"},
              {"vocab_size", 64},
              {"hidden_size", 16},
              {"intermediate_size", 40},
              {"num_hidden_layers", 5},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 8},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", true},
              {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
              {"attention_bias", false},
              {"use_sliding_window", false},
              {"layer_types", json::array({"full_attention", "full_attention", "full_attention", "full_attention",
                                           "full_attention"})}};
}

json mistral3Json() {
  json text = qwen3Json();
  text["model_type"] = "mistral";
  text.erase("layer_types");
  text.erase("use_sliding_window");
  text["sliding_window"] = nullptr;
  text["tie_word_embeddings"] = false;
  return json{{"model_type", "mistral3"},
              {"architectures", {"Mistral3ForConditionalGeneration"}},
              {"text_config", text},
              {"vision_config", {{"model_type", "pixtral"}, {"hidden_size", 16}}},
              {"tie_word_embeddings", true}};
}

std::string configError(const json& j) {
  try {
    LlamaConfig::fromJson(j, "/m/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// Every parameter of `model` under the file names of `layout`, plus a vision tower.
std::vector<std::pair<std::string, at::Tensor>> fileTensors(LlamaForCausalLM& model, LlamaKeyLayout layout) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(llamaFileKey(p.key(), layout), p.value().detach());
  const std::string vision = layout == LlamaKeyLayout::kMistral3 ? "model." : "";
  if (layout != LlamaKeyLayout::kCausalLm) {
    out.emplace_back(vision + "vision_tower.patch_conv.weight", at::randn({16, 3, 8, 8}));
    out.emplace_back(vision + "multi_modal_projector.linear_1.weight", at::randn({16, 16}));
  }
  return out;
}

}  // namespace

TEST(LlamaTextModel, Qwen3ConfigHasQkNormAndItsOwnHeadDim) {
  const auto c = LlamaConfig::fromJson(qwen3Json());
  EXPECT_EQ(c.modelType, "qwen3");
  EXPECT_TRUE(c.qkNorm);
  EXPECT_FALSE(c.qkvBias);
  EXPECT_FALSE(c.outputBias);
  EXPECT_EQ(c.qDim(), 32);  // 4 heads x 8: wider than hidden_size 16
  json noHeadDim = qwen3Json();
  noHeadDim.erase("head_dim");
  EXPECT_EQ(LlamaConfig::fromJson(noHeadDim).headDim, 128);  // Qwen3Config's default, not hidden / heads
  json bias = qwen3Json();
  bias["attention_bias"] = true;
  EXPECT_TRUE(LlamaConfig::fromJson(bias).outputBias);
  json window = qwen3Json();
  window["use_sliding_window"] = true;
  EXPECT_NE(configError(window).find("key 'use_sliding_window'"), std::string::npos) << configError(window);
  json types = qwen3Json();
  types["layer_types"][2] = "sliding_attention";
  EXPECT_NE(configError(types).find("key 'layer_types'"), std::string::npos) << configError(types);
  // Written back, read again: the same model.
  EXPECT_EQ(LlamaConfig::fromJson(c.toJson()).toJson(), c.toJson());
  EXPECT_EQ(c.toJson().at("architectures")[0], "Qwen3ForCausalLM");
  // Bounds hold for the new kind as for the others.
  json huge = qwen3Json();
  huge["head_dim"] = int64_t{1} << 40;
  EXPECT_NE(configError(huge).find("head_dim"), std::string::npos) << configError(huge);
}

TEST(LlamaTextModel, Mistral3ConfigIsItsTextConfig) {
  const auto c = LlamaConfig::fromJson(mistral3Json(), "/m/config.json");
  EXPECT_EQ(c.modelType, "mistral");
  EXPECT_EQ(c.numHiddenLayers, 5);
  EXPECT_EQ(c.headDim, 8);
  EXPECT_FALSE(c.slidingWindow.has_value());
  EXPECT_FALSE(c.tieWordEmbeddings);  // text_config's, not the wrapper's
  EXPECT_DOUBLE_EQ(c.ropeTheta, 1e6);
  // Errors name the wrapper's file and the text_config key.
  json bad = mistral3Json();
  bad["text_config"]["num_hidden_layers"] = int64_t{1} << 40;
  EXPECT_NE(configError(bad).find("/m/config.json: text_config"), std::string::npos) << configError(bad);
  EXPECT_NE(configError(bad).find("num_hidden_layers"), std::string::npos) << configError(bad);
  bad = mistral3Json();
  bad.erase("text_config");
  EXPECT_NE(configError(bad).find("key 'text_config'"), std::string::npos) << configError(bad);
  bad = mistral3Json();
  bad["text_config"]["model_type"] = "ministral3";
  EXPECT_NE(configError(bad).find("text_config.model_type"), std::string::npos) << configError(bad);
}

TEST(LlamaTextModel, QkNormNormalisesEachHeadBeforeTheRotation) {
  torch::manual_seed(3);
  const auto cfg = LlamaConfig::fromJson(qwen3Json());
  LlamaForCausalLM model(cfg);
  auto& layer = *model.layer(0);
  ASSERT_TRUE(layer.qNorm && layer.kNorm);
  at::NoGradGuard g;
  layer.qNorm->weight.uniform_(0.5, 1.5);
  layer.kNorm->weight.uniform_(0.5, 1.5);
  std::set<std::string> names;
  for (const auto& p : model.named_parameters()) names.insert(p.key());
  EXPECT_TRUE(names.count("model.layers.4.self_attn.q_norm.weight"));
  EXPECT_TRUE(names.count("model.layers.4.self_attn.k_norm.weight"));
  EXPECT_EQ(llamaParamShapes(cfg).size(), names.size());

  // The layer by hand: q/k per head through RMSNorm(head_dim), then rotated.
  LlamaInputs in;
  in.inputIds = at::randint(0, 64, {2, 5}, at::kLong);
  const nn::BlockIO io = model.stem(in);
  const auto x = io.img;
  auto rms = [](const at::Tensor& t, const at::Tensor& w, double eps) {
    return w * (t * at::rsqrt(t.pow(2).mean(-1, true) + eps));
  };
  const auto h = rms(x, layer.inputLayernorm->weight, cfg.rmsNormEps);
  auto q = layer.qProj->forward(h).view({2, 5, 4, 8});
  auto k = layer.kProj->forward(h).view({2, 5, 2, 8});
  const auto v = layer.vProj->forward(h).view({2, 5, 2, 8}).transpose(1, 2).repeat_interleave(2, 1);
  q = applyRotaryHalves(rms(q, layer.qNorm->weight, cfg.rmsNormEps).transpose(1, 2), io.ropeCos, io.ropeSin);
  k = applyRotaryHalves(rms(k, layer.kNorm->weight, cfg.rmsNormEps).transpose(1, 2), io.ropeCos, io.ropeSin)
          .repeat_interleave(2, 1);
  const auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0) + io.mask;
  const auto attn = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({2, 5, 32});
  const auto mid = x + layer.oProj->forward(attn);
  const auto m = rms(mid, layer.postAttentionLayernorm->weight, cfg.rmsNormEps);
  const auto expected = mid + layer.downProj->forward(at::silu(layer.gateProj->forward(m)) * layer.upProj->forward(m));
  EXPECT_TRUE(test::allClose(layer.forward(io).img, expected, 1e-5, 1e-5));
}

TEST(LlamaTextModel, AQueryThatSeesNoKeyAttendsToNothing) {
  torch::manual_seed(4);
  LlamaForCausalLM model(LlamaConfig::tiny());
  at::NoGradGuard g;
  LlamaInputs in;
  in.inputIds = at::randint(1, 96, {1, 6}, at::kLong);
  in.attentionMask = at::tensor({0, 0, 1, 1, 1, 1}, at::kLong).unsqueeze(0);  // left padding, positions 0..5
  const nn::BlockIO io = model.stem(in);
  auto& layer = *model.layer(0);
  const auto out = layer.forward(io).img;
  // Rows 0 and 1 see only padding keys: the attention adds nothing, the MLP still runs.
  const auto x = io.img.narrow(1, 0, 2);
  const auto m = layer.postAttentionLayernorm->forward(x);
  const auto expected = x + layer.downProj->forward(at::silu(layer.gateProj->forward(m)) * layer.upProj->forward(m));
  EXPECT_TRUE(test::allClose(out.narrow(1, 0, 2), expected, 1e-6, 1e-6));
}

TEST(LlamaTextModel, KeyLayoutsMapBothWays) {
  using L = LlamaKeyLayout;
  EXPECT_EQ(llamaFileKey("model.layers.3.mlp.up_proj.weight", L::kCausalLm), "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(llamaFileKey("model.layers.3.mlp.up_proj.weight", L::kMistral3Legacy),
            "language_model.model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(llamaFileKey("model.norm.weight", L::kMistral3), "model.language_model.norm.weight");
  EXPECT_EQ(llamaFileKey("lm_head.weight", L::kMistral3Legacy), "language_model.lm_head.weight");
  EXPECT_EQ(llamaFileKey("lm_head.weight", L::kMistral3), "lm_head.weight");
  for (const auto layout : {L::kCausalLm, L::kMistral3Legacy, L::kMistral3})
    for (const std::string key :
         {"model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight", "lm_head.weight"})
      EXPECT_EQ(llamaModelKey(llamaFileKey(key, layout), layout).value_or("?"), key) << toString(layout);
  // The vision parts are recognised in their layout, and only there.
  EXPECT_FALSE(llamaSkippedPart("vision_tower.patch_conv.weight", L::kMistral3Legacy).empty());
  EXPECT_FALSE(llamaSkippedPart("multi_modal_projector.linear_1.weight", L::kMistral3Legacy).empty());
  EXPECT_FALSE(llamaSkippedPart("model.vision_tower.patch_conv.weight", L::kMistral3).empty());
  EXPECT_FALSE(llamaSkippedPart("model.multi_modal_projector.norm.weight", L::kMistral3).empty());
  EXPECT_TRUE(llamaSkippedPart("vision_tower.patch_conv.weight", L::kMistral3).empty());
  EXPECT_TRUE(llamaSkippedPart("vision_tower.patch_conv.weight", L::kCausalLm).empty());
  EXPECT_FALSE(llamaModelKey("model.vision_tower.patch_conv.weight", L::kMistral3).has_value());
  EXPECT_FALSE(llamaModelKey("language_model.extra.weight", L::kMistral3Legacy).has_value());
}

TEST(LlamaTextModel, EveryLayoutLoadsTheSameModelUpToTheLayerNeeded) {
  torch::manual_seed(5);
  const auto cfg = LlamaConfig::fromJson(mistral3Json());
  LlamaForCausalLM full(cfg);
  LlamaInputs in;
  in.inputIds = at::randint(0, 64, {2, 7}, at::kLong);
  in.attentionMask = at::tensor({0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, at::kLong).view({2, 7});
  at::NoGradGuard g;
  // hidden_states[3] of the whole model: the output of layer index 2.
  nn::BlockIO ref = full.stem(in);
  for (size_t i = 0; i < 3; ++i) ref = full.layer(i)->forward(ref);

  for (const auto layout : {LlamaKeyLayout::kCausalLm, LlamaKeyLayout::kMistral3Legacy, LlamaKeyLayout::kMistral3}) {
    test::TempDir dir;
    io::writeSafetensors(dir / "model.safetensors", fileTensors(full, layout));
    const auto weights = openLlamaWeights(dir.path());
    EXPECT_EQ(detectLlamaKeyLayout(weights), layout);
    const auto model = streamLlamaTextModel(weights, cfg, 3, {});
    EXPECT_EQ(model->layerCount(), 3u);
    EXPECT_FALSE(model->lmHead);  // the head is never read for hidden states
    nn::BlockIO io = model->stem(in);
    for (size_t i = 0; i < 3; ++i) io = model->layer(i)->forward(io);
    EXPECT_TRUE(at::equal(io.img, ref.img)) << toString(layout);
  }
}

TEST(LlamaTextModel, StrictLoadNamesUnknownAndMissingKeys) {
  torch::manual_seed(6);
  const auto cfg = LlamaConfig::fromJson(mistral3Json());
  LlamaForCausalLM full(cfg);
  test::TempDir dir;
  auto tensors = fileTensors(full, LlamaKeyLayout::kMistral3);
  tensors.emplace_back("model.audio_tower.weight", at::zeros({2}));
  tensors.erase(std::find_if(tensors.begin(), tensors.end(), [](const auto& t) {
    return t.first == "model.language_model.layers.1.mlp.up_proj.weight";
  }));
  io::writeSafetensors(dir / "model.safetensors", tensors);
  try {
    streamLlamaTextModel(openLlamaWeights(dir.path()), cfg, 5, {});
    FAIL() << "no error";
  } catch (const LoadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find("model.audio_tower.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("model.language_model.layers.1.mlp.up_proj.weight"), std::string::npos) << what;
    EXPECT_EQ(what.find("vision_tower"), std::string::npos) << what;  // known, skipped
  }
  // Layers past the last one needed are not read, so a file missing one still loads up to it.
  tensors.erase(std::find_if(tensors.begin(), tensors.end(),
                             [](const auto& t) { return t.first == "model.audio_tower.weight"; }));
  io::writeSafetensors(dir / "model.safetensors", tensors);
  EXPECT_NO_THROW(streamLlamaTextModel(openLlamaWeights(dir.path()), cfg, 1, {}).reset());
  EXPECT_THROW(streamLlamaTextModel(openLlamaWeights(dir.path()), cfg, 6, {}), ConfigError);
  EXPECT_THROW(streamLlamaTextModel(openLlamaWeights(dir.path()), cfg, 0, {}), ConfigError);
  // No language model at all: said so with the file.
  test::TempDir none;
  io::writeSafetensors(none / "model.safetensors", {{"vision_tower.x", at::zeros({1})}});
  try {
    detectLlamaKeyLayout(openLlamaWeights(none.path()));
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("embed_tokens"), std::string::npos) << e.what();
  }
}

TEST(LlamaTextModel, Qwen3PlanCountsTheNormsAndQuantizedStreamingReadsOnlyTheLayersNeeded) {
  torch::manual_seed(9);
  const auto cfg = LlamaConfig::fromJson(qwen3Json());
  LlamaForCausalLM full(cfg);
  int64_t params = 0;
  for (const auto& p : full.parameters()) params += p.numel();
  EXPECT_EQ(llamaParamPlan(cfg).totalParams(), params);  // q_norm and k_norm counted, lm_head tied
  test::TempDir dir;
  io::writeSafetensors(dir / "model.safetensors", fileTensors(full, LlamaKeyLayout::kCausalLm));
  std::vector<std::pair<int64_t, int64_t>> progress;
  LlamaStreamOptions so;
  so.quantize = nn::QuantType::Int8;
  so.onProgress = [&](int64_t done, int64_t total) { progress.emplace_back(done, total); };
  const auto model = streamLlamaTextModel(openLlamaWeights(dir.path()), cfg, 2, {}, so);
  EXPECT_EQ(progress.back(), (std::pair<int64_t, int64_t>{3, 3}));  // 2 layers + the stem and norm
  int64_t quantized = 0;
  for (const auto& [path, lin] : model->linears()) quantized += lin->quantType() == nn::QuantType::Int8;
  EXPECT_EQ(quantized, 2 * 7);
  EXPECT_TRUE(at::equal(model->layer(1)->qNorm->weight, full.layer(1)->qNorm->weight));  // norms stay exact
  at::NoGradGuard g;
  LlamaInputs in;
  in.inputIds = at::randint(0, 64, {2, 6}, at::kLong);
  nn::BlockIO want = full.stem(in), got = model->stem(in);
  for (size_t i = 0; i < 2; ++i) {
    want = full.layer(i)->forward(want);
    got = model->layer(i)->forward(got);
  }
  EXPECT_LT(test::relL2(got.img, want.img), 0.05);
  EXPECT_GT(test::relL2(got.img, want.img), 0.0) << "the layers were not quantized";
}
