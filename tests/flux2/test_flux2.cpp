// FLUX.2 family on CPU without reference numbers: config validation (messages name
// the key), presets, detection from shapes, the BFL name map, strict loading
// errors (a renamed key, a wrong shape), diffusers <-> BFL round trips on configs
// other than the fixture's, LoRA name rules, the empirical mu.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "flux2/Flux2TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Names.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "placement/Placement.h"

using namespace strata;
using flux2::Flux2Config;
using flux2::test::otherConfig;
using flux2::test::randomInputs;

namespace {

// The message of the ConfigError that fromDiffusersJson throws for `j` ("" when none).
std::string configErrorOf(const nlohmann::json& j) {
  try {
    Flux2Config::fromDiffusersJson(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string loadErrorOf(flux2::Flux2Transformer& model, const std::filesystem::path& file) {
  try {
    flux2::loadFlux2Weights(model, file);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::pair<std::string, at::Tensor>> diffusersTensors(flux2::Flux2Transformer& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters(true)) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

}  // namespace

TEST(Flux2ConfigTest, DefaultsAreFlux2Dev) {
  const auto c = Flux2Config::preset("flux2-dev");
  EXPECT_EQ(c, Flux2Config::flux2Dev());
  EXPECT_EQ(c.hiddenSize(), 6144);
  EXPECT_EQ(c.mlpHiddenSize(), 18432);
  EXPECT_EQ(c.numLayers, 8);
  EXPECT_EQ(c.numSingleLayers, 48);
  EXPECT_EQ(c.jointAttentionDim, 15360);
  EXPECT_EQ(c.inChannels, 128);
  EXPECT_EQ(c.axesDimsRope, (std::vector<int64_t>{32, 32, 32, 32}));
  EXPECT_TRUE(c.guidanceEmbeds);
  // FLUX.2-dev is a 32 B transformer; counted from the layout without building it.
  const double params = static_cast<double>(flux2::flux2ParamPlan(c).totalParams());
  EXPECT_GT(params, 31.5e9);
  EXPECT_LT(params, 32.5e9);
  EXPECT_THROW(Flux2Config::preset("flux3"), ConfigError);
}

TEST(Flux2ConfigTest, KleinPresetsHaveTheReleasedShapes) {
  // FLUX.2 [klein] 9B and 4B: no guidance embedding, text width 3 x Qwen3's hidden size.
  const auto k9 = Flux2Config::preset("flux2-klein-9b");
  EXPECT_EQ(k9.hiddenSize(), 4096);
  EXPECT_EQ(k9.numLayers, 8);
  EXPECT_EQ(k9.numSingleLayers, 24);
  EXPECT_EQ(k9.jointAttentionDim, 3 * 4096);
  EXPECT_FALSE(k9.guidanceEmbeds);
  const auto k4 = Flux2Config::preset("flux2-klein-4b");
  EXPECT_EQ(k4.hiddenSize(), 3072);
  EXPECT_EQ(k4.numLayers, 5);
  EXPECT_EQ(k4.numSingleLayers, 20);
  EXPECT_EQ(k4.jointAttentionDim, 3 * 2560);
  EXPECT_FALSE(k4.guidanceEmbeds);
  // The names say the transformers' sizes, counted from the layout.
  const double p9 = static_cast<double>(flux2::flux2ParamPlan(k9).totalParams());
  const double p4 = static_cast<double>(flux2::flux2ParamPlan(k4).totalParams());
  EXPECT_GT(p9, 8.5e9) << p9;
  EXPECT_LT(p9, 9.5e9) << p9;
  EXPECT_GT(p4, 3.5e9) << p4;
  EXPECT_LT(p4, 4.5e9) << p4;
  for (const auto& name : Flux2Config::presetNames()) EXPECT_NO_THROW(Flux2Config::preset(name).validate()) << name;
}

TEST(Flux2ConfigTest, JsonRoundTripAndAbsentKeysTakeDefaults) {
  const auto c = otherConfig();
  EXPECT_EQ(Flux2Config::fromDiffusersJson(c.toDiffusersJson()), c);
  const auto d = Flux2Config::fromDiffusersJson(nlohmann::json{{"num_layers", 2}, {"out_channels", nullptr}});
  EXPECT_EQ(d.numLayers, 2);
  EXPECT_EQ(d.outChannels, d.inChannels);  // null out_channels = in_channels
  EXPECT_EQ(d.numSingleLayers, Flux2Config{}.numSingleLayers);
}

TEST(Flux2ConfigTest, ValidationNamesTheKey) {
  auto base = Flux2Config::tiny().toDiffusersJson();
  auto with = [&](const char* key, const nlohmann::json& value) {
    auto j = base;
    j[key] = value;
    return configErrorOf(j);
  };
  EXPECT_NE(with("num_layers", "eight").find("num_layers"), std::string::npos);
  EXPECT_NE(with("patch_size", 2).find("patch_size"), std::string::npos);
  EXPECT_NE(with("axes_dims_rope", nlohmann::json::array({8, 8, 8, 6})).find("axes_dims_rope"), std::string::npos);
  EXPECT_NE(with("axes_dims_rope", nlohmann::json::array({8, 8, 7, 9})).find("axes_dims_rope"), std::string::npos);
  EXPECT_NE(with("timestep_guidance_channels", 255).find("timestep_guidance_channels"), std::string::npos);
  EXPECT_NE(with("eps", 0).find("eps"), std::string::npos);
  EXPECT_NE(with("mlp_ratio", -1.0).find("mlp_ratio"), std::string::npos);
  EXPECT_NE(with("rope_theta", "big").find("rope_theta"), std::string::npos);
  EXPECT_NE(with("guidance_embeds", 3).find("guidance_embeds"), std::string::npos);
  EXPECT_EQ(with("num_layers", 0), "");  // single blocks alone are a valid model
  auto none = base;
  none["num_layers"] = 0;
  none["num_single_layers"] = 0;
  EXPECT_NE(configErrorOf(none).find("num_single_layers"), std::string::npos);
  EXPECT_NE(configErrorOf(nlohmann::json::array()).find("not a JSON object"), std::string::npos);
}

TEST(Flux2ConfigTest, ConfigFileErrorsNameTheFile) {
  test::TempDir dir;
  { std::ofstream(dir / "config.json") << R"({"num_attention_heads": "many"})"; }
  try {
    Flux2Config::fromDiffusersJsonFile(dir / "config.json");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
}

TEST(Flux2NamesTest, EveryParameterHasOneBflKeyAndFusedRowsTile) {
  for (const auto& cfg : {Flux2Config::tiny(), otherConfig()}) {
    flux2::Flux2Transformer model(cfg);
    const flux2::Flux2Names names(cfg);
    std::map<std::string, int64_t> rowsPerKey;
    for (const auto& p : model.named_parameters(true)) {
      const auto ref = names.bflParamForKey(p.key());
      ASSERT_TRUE(ref.has_value()) << p.key();
      EXPECT_EQ(ref->slot.rows, p.value().size(0)) << p.key();
      EXPECT_EQ(ref->slot.rowOffset, ref->slot.part * ref->slot.rows) << p.key();
      rowsPerKey[ref->key] += ref->slot.rows;
      EXPECT_LE(rowsPerKey[ref->key], ref->slot.totalRows) << ref->key;
    }
    EXPECT_FALSE(names.bflParamForKey("transformer_blocks.0.attn.to_q.bias"));            // no biases in FLUX.2
    EXPECT_FALSE(names.bflParamForKey("time_text_embed.text_embedder.linear_1.weight"));  // FLUX.1 only
    const auto qkv = names.diffusersModulesForBfl("double_blocks.0.txt_attn.qkv");
    ASSERT_EQ(qkv.size(), 3u);
    EXPECT_EQ(qkv[0].first, "transformer_blocks.0.attn.add_q_proj");
    EXPECT_EQ(qkv[2].first, "transformer_blocks.0.attn.add_v_proj");
    EXPECT_TRUE(names.bflSlotForModule("norm_out.linear")->swapHalves);
    EXPECT_EQ(names.bflModuleFromKohya("lora_unet_single_blocks_0_linear1"), std::string("single_blocks.0.linear1"));
    EXPECT_FALSE(names.bflModuleFromKohya("lora_unet_single_blocks_99_linear1"));
  }
}

TEST(Flux2ModelTest, DiffusersAndBflFilesRoundTripOnAnotherConfig) {
  // Not the fixture's shapes: guidance off, odd head count, mlp ratio 2.5, other axes.
  const auto cfg = otherConfig();
  at::manual_seed(3);
  flux2::Flux2Transformer model(cfg);
  test::TempDir dir;
  io::writeSafetensors(dir / "d.safetensors", diffusersTensors(model));
  io::writeSafetensors(dir / "b.safetensors", flux2::flux2BflStateDict(model));
  io::writeSafetensors(dir / "comfy.safetensors", [&] {
    auto t = flux2::flux2BflStateDict(model);
    for (auto& kv : t) kv.first = "model.diffusion_model." + kv.first;
    return t;
  }());
  for (const char* file : {"d.safetensors", "b.safetensors", "comfy.safetensors"}) {
    EXPECT_EQ(flux2::flux2ConfigFromCheckpoint(dir / file, cfg), cfg) << file;
    auto loaded = flux2::loadFlux2Transformer(dir / file, {}, cfg);
    const auto want = model.named_parameters(true);
    for (const auto& p : loaded->named_parameters(true))
      EXPECT_TRUE(test::allClose(p.value(), want[p.key()], 0, 0)) << file << ": " << p.key();
  }
  // Guidance is not needed without a guidance embedding, and forward keeps the token shape.
  auto in = randomInputs(cfg, 2, 3, 4, 5);
  in.guidance = at::Tensor();
  at::NoGradGuard noGrad;
  const auto out = model.forward(in);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 12, cfg.outChannels}));
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
}

TEST(Flux2ConfigTest, ShapesKeepTheBaseMlpRatioWhenItGivesTheWidth) {
  auto cfg = otherConfig();
  cfg.mlpRatio = 2.6;  // int(36 x 2.6) = 93 rows, 93 / 36 is not 2.6
  flux2::Flux2Transformer model(cfg);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : model.named_parameters(true)) shapes[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(Flux2Config::fromShapes(shapes, cfg), cfg);
  const auto plain = Flux2Config::fromShapes(shapes, otherConfig());  // ratio 2.5 gives 90, not 93
  EXPECT_EQ(plain.mlpHiddenSize(), cfg.mlpHiddenSize());
  EXPECT_FALSE(plain.guidanceEmbeds);
  EXPECT_EQ(plain.numAttentionHeads, 3);
  EXPECT_EQ(plain.timestepGuidanceChannels, 64);
  shapes.erase("x_embedder.weight");
  try {
    Flux2Config::fromShapes(shapes);
    FAIL() << "no LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("x_embedder.weight"), std::string::npos) << e.what();
  }
}

TEST(Flux2ModelTest, GuidanceRequiredWhenEmbedded) {
  const auto cfg = Flux2Config::tiny();
  flux2::Flux2Transformer model(cfg);
  auto in = randomInputs(cfg, 1, 2, 2, 3);
  in.guidance = at::Tensor();
  at::NoGradGuard noGrad;
  EXPECT_THROW(model.forward(in), Error);
}

TEST(Flux2ModelTest, BlockListSplitsStemBlocksHead) {
  const auto cfg = otherConfig();
  flux2::Flux2Transformer model(cfg);
  const auto list = model.blockList();
  ASSERT_EQ(list.blocks.size(), static_cast<size_t>(cfg.numLayers + cfg.numSingleLayers));
  EXPECT_EQ(list.blocks.front().id, "transformer_blocks.0");
  EXPECT_EQ(list.blocks.back().id, "single_transformer_blocks.2");
  std::set<std::string> stem;
  for (const auto& m : list.stem.modules) stem.insert(m.path);
  EXPECT_TRUE(stem.count("double_stream_modulation_img"));
  EXPECT_TRUE(stem.count("single_stream_modulation"));
  // Every parameter lies in exactly one unit.
  int64_t counted = 0;
  auto count = [&](const nn::BlockSlot& s) {
    for (const auto& m : s.modules)
      for (const auto& p : m.module->parameters()) counted += p.numel();
  };
  count(list.stem);
  for (const auto& b : list.blocks) count(b);
  count(list.head);
  int64_t all = 0;
  for (const auto& p : model.parameters()) all += p.numel();
  EXPECT_EQ(counted, all);
}

TEST(Flux2ModelTest, PlacementOwnsEveryAdapterAndTheSplitChangesNothing) {
  // Logic only (every "device" is the cpu): Placement takes FLUX.2's block list, the
  // adapters on the shared modulation belong to the stem, and the relay of BlockIO
  // (the modulation rides in temb) changes no number. The two-GPU version is in tests/gpu.
  const auto cfg = otherConfig();
  at::manual_seed(11);
  flux2::Flux2Transformer a(cfg), b(cfg);
  {
    at::NoGradGuard g;
    const auto src = a.named_parameters(true);
    for (auto& p : b.named_parameters(true)) p.value().copy_(src[p.key()]);
  }
  lora::LoraConfig c;
  c.rank = 2;
  c.alpha = 2;
  c.targetModules = {"re:.*"};
  const auto na = lora::LoraNetwork::create(a, c, flux2::Flux2LoraRules(cfg));
  const auto nb = lora::LoraNetwork::create(b, c, flux2::Flux2LoraRules(cfg));
  {
    at::NoGradGuard g;
    for (size_t i = 0; i < na->adapters().size(); ++i) {
      na->adapters()[i]->up.normal_(0, 0.1);
      nb->adapters()[i]->setWeights(na->adapters()[i]->down, na->adapters()[i]->up);
    }
  }
  const std::vector<c10::Device> devs(cfg.numLayers + cfg.numSingleLayers, at::kCPU);
  placement::Placement split(b.blockList(), devs, at::kCPU, at::kCPU);
  split.attachAll(nb->attachments());
  split.apply();
  EXPECT_TRUE(split.audit().empty());
  EXPECT_EQ(split.ownerOf("double_stream_modulation_txt.linear"), "stem");
  EXPECT_EQ(split.ownerOf("norm_out.linear"), "head");
  EXPECT_EQ(split.ownerOf("single_transformer_blocks.1.attn.to_qkv_mlp_proj"), "single_transformer_blocks.1");

  const auto in = randomInputs(cfg, 2, 2, 3, 4);
  const auto ya = a.forward(in);
  const auto yb = b.forward(in, &split);
  EXPECT_TRUE(at::equal(ya, yb));
  ya.pow(2).mean().backward();
  yb.pow(2).mean().backward();
  for (size_t i = 0; i < na->adapters().size(); ++i) {
    const auto& la = na->adapters()[i];
    const auto& lb = nb->adapters()[i];
    ASSERT_TRUE(la->down.grad().defined() && lb->down.grad().defined()) << la->hostPath();
    EXPECT_TRUE(at::equal(la->down.grad(), lb->down.grad())) << la->hostPath();
    EXPECT_TRUE(at::equal(la->up.grad(), lb->up.grad())) << la->hostPath();
  }
}

TEST(Flux2LoadTest, RenamedKeyIsNamedWithTheFile) {
  const auto cfg = Flux2Config::tiny();
  flux2::Flux2Transformer model(cfg);
  auto tensors = diffusersTensors(model);
  for (auto& kv : tensors)
    if (kv.first == "transformer_blocks.1.attn.to_k.weight") kv.first = "transformer_blocks.1.attn.to_key.weight";
  test::TempDir dir;
  io::writeSafetensors(dir / "renamed.safetensors", tensors);
  const auto msg = loadErrorOf(model, dir / "renamed.safetensors");
  EXPECT_NE(msg.find("renamed.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: transformer_blocks.1.attn.to_k.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: transformer_blocks.1.attn.to_key.weight"), std::string::npos) << msg;
}

TEST(Flux2LoadTest, WrongShapeIsNamedWithBothShapes) {
  const auto cfg = Flux2Config::tiny();
  flux2::Flux2Transformer model(cfg);
  auto bfl = flux2::flux2BflStateDict(model);
  for (auto& kv : bfl)  // a qkv with the rows of two projections only
    if (kv.first == "double_blocks.0.img_attn.qkv.weight") kv.second = kv.second.narrow(0, 0, 2 * cfg.hiddenSize());
  test::TempDir dir;
  io::writeSafetensors(dir / "bfl.safetensors", bfl);
  const auto before = model.named_parameters(true)["transformer_blocks.0.attn.to_q.weight"].clone();
  const auto msg = loadErrorOf(model, dir / "bfl.safetensors");
  EXPECT_NE(msg.find("bfl.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: double_blocks.0.img_attn.qkv.weight expected [384, 128], got [256, 128]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("nothing loaded"), std::string::npos) << msg;
  EXPECT_TRUE(test::allClose(model.named_parameters(true)["transformer_blocks.0.attn.to_q.weight"], before, 0, 0));
}

TEST(Flux2LoadTest, FileWithoutAModuleOrWithAnExtraOneIsRefused) {
  const auto cfg = otherConfig();
  flux2::Flux2Transformer model(cfg);
  auto tensors = diffusersTensors(model);
  tensors.emplace_back("time_guidance_embed.guidance_embedder.linear_1.weight", at::zeros({36, 64}));
  test::TempDir dir;
  io::writeSafetensors(dir / "extra.safetensors", tensors);
  EXPECT_NE(loadErrorOf(model, dir / "extra.safetensors")
                .find("unexpected: time_guidance_embed.guidance_embedder.linear_1.weight"),
            std::string::npos);
  tensors.pop_back();
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [](const auto& kv) { return kv.first == "single_stream_modulation.linear.weight"; }),
                tensors.end());
  io::writeSafetensors(dir / "short.safetensors", tensors);
  EXPECT_NE(loadErrorOf(model, dir / "short.safetensors").find("missing: single_stream_modulation.linear.weight"),
            std::string::npos);
}

TEST(Flux2LoraRulesTest, EveryFormNamesTheModulationAndRefusesUnknownKeys) {
  const auto cfg = otherConfig();
  const flux2::Flux2LoraRules rules(cfg);
  using F = nn::LoraFileFormat;
  EXPECT_EQ(rules.slotOf("double_stream_modulation_txt.linear", F::Diffusers)->stem,
            "transformer.double_stream_modulation_txt.linear");
  EXPECT_EQ(rules.slotOf("double_stream_modulation_txt.linear", F::Kohya)->stem,
            "lora_unet_double_stream_modulation_txt_lin");
  EXPECT_EQ(rules.slotOf("transformer_blocks.0.attn.to_v", F::Comfy)->stem,
            "diffusion_model.double_blocks.0.img_attn.qkv");
  EXPECT_EQ(rules.slotOf("transformer_blocks.0.attn.to_v", F::Comfy)->part, 2);
  EXPECT_TRUE(rules.slotOf("norm_out.linear", F::Kohya)->swapHalves);
  EXPECT_FALSE(rules.slotOf("transformer_blocks.0.attn.norm_q", F::Diffusers));  // an RMSNorm, not a Linear

  const auto m = rules.matchStem("lora_unet_double_blocks_0_txt_attn_qkv");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->modules.size(), 3u);
  EXPECT_EQ(m->modules[1].first, "transformer_blocks.0.attn.add_k_proj");

  // A key naming no module of this model is an error that names the key.
  flux2::Flux2Transformer model(cfg);
  std::map<std::string, at::Tensor> tensors{
      {"transformer.transformer_blocks.7.attn.to_q.lora_A.weight", at::zeros({2, cfg.hiddenSize()})},
      {"transformer.transformer_blocks.7.attn.to_q.lora_B.weight", at::zeros({cfg.hiddenSize(), 2})}};
  try {
    lora::convertLoraTensors(tensors, {}, rules, {}, "bad_lora.safetensors");
    FAIL() << "no LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.7.attn.to_q"), std::string::npos) << e.what();
  }
}

TEST(Flux2LoraRulesTest, AdaptersOnEveryLinearTrainThroughTheSharedModulation) {
  const auto cfg = otherConfig();
  at::manual_seed(5);
  flux2::Flux2Transformer model(cfg);
  lora::LoraConfig c;
  c.rank = 2;
  c.alpha = 2;
  c.targetModules = {"re:.*"};
  const auto net = lora::LoraNetwork::create(model, c, flux2::Flux2LoraRules(cfg));
  EXPECT_EQ(net->adapters().size(), flux2::Flux2LoraRules(cfg).linears().size());
  {
    at::NoGradGuard g;
    for (const auto& a : net->adapters()) a->up.normal_(0, 0.1);  // non-zero ups: every down gets a gradient
  }
  const auto out = model.forward(randomInputs(cfg, 1, 2, 3, 4));
  out.pow(2).mean().backward();
  for (const auto& a : net->adapters())
    for (const auto& p : {a->down, a->up})
      EXPECT_TRUE(p.grad().defined() && p.grad().abs().sum().item<double>() > 0) << a->hostPath();
}

TEST(Flux2SamplingTest, EmpiricalMuAndHelpers) {
  // Above 4300 tokens the 200-step line alone.
  EXPECT_NEAR(flux2::computeEmpiricalMu(4096 * 2, 28), 0.00016927 * 8192 + 0.45666666, 1e-12);
  // At 10 and 200 steps the two fitted lines themselves.
  EXPECT_NEAR(flux2::computeEmpiricalMu(1024, 10), 8.73809524e-05 * 1024 + 1.89833333, 1e-9);
  EXPECT_NEAR(flux2::computeEmpiricalMu(1024, 200), 0.00016927 * 1024 + 0.45666666, 1e-9);
  const auto sigmas = flux2::samplingSigmas(6, 1024);
  ASSERT_EQ(sigmas.size(0), 7);
  EXPECT_FLOAT_EQ(sigmas[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(sigmas[6].item<float>(), 0.0f);
  const auto x = at::randn({2, 3, 6, 8});
  const auto p = flux2::patchifyLatents(x);
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{2, 12, 3, 4}));
  EXPECT_TRUE(test::allClose(flux2::unpatchifyLatents(p), x, 0, 0));
  EXPECT_TRUE(test::allClose(flux2::unpackLatentsWithIds(flux2::packLatents(p), flux2::latentIds(3, 4)), p, 0, 0));
  EXPECT_THROW(flux2::patchifyLatents(at::zeros({1, 2, 3, 4})), Error);
}
