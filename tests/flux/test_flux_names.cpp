#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/Error.h"

#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLayout.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxNames.h"
#include "models/flux/FluxTransformer.h"

using namespace strata::flux;
using namespace strata::flux::names;

namespace {
FluxConfig smallConfig() {
  FluxConfig c;
  c.inChannels = 16;
  c.outChannels = 16;
  c.numLayers = 2;
  c.numSingleLayers = 2;
  c.attentionHeadDim = 16;
  c.numAttentionHeads = 2;
  c.jointAttentionDim = 24;
  c.pooledProjectionDim = 20;
  c.axesDimsRope = {4, 6, 6};
  return c;
}
}  // namespace

TEST(FluxNames, FusedSlotsOfDoubleAndSingleBlocks) {
  const auto cfg = FluxConfig::fluxDev();
  auto k = bflSlotForModule("transformer_blocks.3.attn.to_k", cfg);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->module, "double_blocks.3.img_attn.qkv");
  EXPECT_EQ(k->part, 1);
  EXPECT_EQ(k->parts, 3);
  EXPECT_EQ(k->rowOffset, 3072);
  EXPECT_EQ(k->rows, 3072);
  EXPECT_EQ(k->totalRows, 9216);
  auto mlp = bflSlotForModule("single_transformer_blocks.37.proj_mlp", cfg);
  ASSERT_TRUE(mlp);
  EXPECT_EQ(mlp->module, "single_blocks.37.linear1");
  EXPECT_EQ(mlp->rowOffset, 3 * 3072);
  EXPECT_EQ(mlp->rows, 4 * 3072);
  EXPECT_EQ(mlp->totalRows, 7 * 3072);
  auto addV = bflSlotForModule("transformer_blocks.0.attn.add_v_proj", cfg);
  ASSERT_TRUE(addV);
  EXPECT_EQ(addV->module, "double_blocks.0.txt_attn.qkv");
  EXPECT_EQ(addV->part, 2);
  auto normOut = bflSlotForModule("norm_out.linear", cfg);
  ASSERT_TRUE(normOut);
  EXPECT_EQ(normOut->module, "final_layer.adaLN_modulation.1");
  EXPECT_TRUE(normOut->swapHalves);
  EXPECT_FALSE(normOut->fused());
  EXPECT_FALSE(bflSlotForModule("transformer_blocks.0.attn.to_x", cfg));
  EXPECT_FALSE(bflSlotForModule("transformer_blocks.x.attn.to_q", cfg));
}

TEST(FluxNames, ParamKeysBothWaysForEveryParameter) {
  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  std::set<std::string> bflKeys;
  for (const auto& p : model.named_parameters(true)) {
    auto ref = bflParamForKey(p.key(), cfg);
    ASSERT_TRUE(ref) << p.key();
    bflKeys.insert(ref->key);
    // Back: the BFL key lists this diffusers key at the same slot.
    bool found = false;
    for (const auto& [diffKey, slot] : diffusersKeysForBflKey(ref->key, cfg))
      if (diffKey == p.key()) {
        found = true;
        EXPECT_EQ(slot.rowOffset, ref->slot.rowOffset) << p.key();
        EXPECT_EQ(slot.rows, p.value().size(0)) << p.key();
      }
    EXPECT_TRUE(found) << p.key() << " -> " << ref->key;
  }
  // RMSNorm weight <-> scale.
  EXPECT_EQ(bflParamForKey("transformer_blocks.1.attn.norm_added_k.weight", cfg)->key,
            "double_blocks.1.txt_attn.norm.key_norm.scale");
  EXPECT_EQ(bflParamForKey("single_transformer_blocks.0.attn.norm_q.weight", cfg)->key,
            "single_blocks.0.norm.query_norm.scale");
  EXPECT_FALSE(bflParamForKey("transformer_blocks.1.attn.norm_added_k.bias", cfg));
  EXPECT_TRUE(bflKeys.count("time_in.in_layer.weight"));
  EXPECT_TRUE(bflKeys.count("vector_in.out_layer.bias"));
  EXPECT_TRUE(bflKeys.count("guidance_in.in_layer.weight"));
  EXPECT_TRUE(bflKeys.count("final_layer.linear.weight"));
  EXPECT_TRUE(bflKeys.count("double_blocks.1.img_mlp.2.weight"));
  EXPECT_TRUE(bflKeys.count("single_blocks.1.linear2.bias"));
  // 4 fused parts of linear1, in row order.
  const auto parts = diffusersModulesForBfl("single_blocks.1.linear1", cfg);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].first, "single_transformer_blocks.1.attn.to_q");
  EXPECT_EQ(parts[3].first, "single_transformer_blocks.1.proj_mlp");
  EXPECT_EQ(parts[3].second.rowOffset, 3 * cfg.hiddenSize());
  EXPECT_TRUE(diffusersModulesForBfl("double_blocks.0.img_attn.qkvx", cfg).empty());
}

TEST(FluxNames, KohyaAndComfyBothWays) {
  const auto cfg = smallConfig();
  FluxTransformer model(cfg);
  for (const auto& [path, linear] : model.linears()) {
    auto slot = bflSlotForModule(path, cfg);
    ASSERT_TRUE(slot) << path;
    const auto kohya = kohyaFromBflModule(slot->module);
    EXPECT_EQ(kohya.find('.'), std::string::npos) << kohya;
    EXPECT_EQ(bflModuleFromKohya(kohya), slot->module) << kohya;
    const auto comfy = comfyFromBflModule(slot->module);
    EXPECT_EQ(bflModuleFromComfy(comfy), slot->module) << comfy;
    EXPECT_EQ(bflModuleFromComfy("model." + comfy), slot->module) << comfy;
  }
  EXPECT_EQ(kohyaFromBflModule("double_blocks.0.img_attn.qkv"), "lora_unet_double_blocks_0_img_attn_qkv");
  EXPECT_EQ(bflModuleFromKohya("lora_unet_single_blocks_12_linear1"), "single_blocks.12.linear1");
  EXPECT_EQ(bflModuleFromKohya("lora_unet_final_layer_adaLN_modulation_1"), "final_layer.adaLN_modulation.1");
  EXPECT_EQ(bflModuleFromKohya("lora_unet_time_in_in_layer"), "time_in.in_layer");
  EXPECT_EQ(comfyFromBflModule("single_blocks.3.linear2"), "diffusion_model.single_blocks.3.linear2");
  EXPECT_FALSE(bflModuleFromKohya("lora_unet_double_blocks_0_img_attn_qkvx"));
  EXPECT_FALSE(bflModuleFromKohya("lora_te_text_model_encoder_layers_0_mlp_fc1"));
  EXPECT_FALSE(bflModuleFromKohya("lora_unet_double_blocks_a_img_attn_qkv"));
  EXPECT_FALSE(bflModuleFromComfy("diffusion_model.double_blocks.0.nothing"));
  EXPECT_FALSE(bflModuleFromComfy("double_blocks.0.img_attn.qkv"));
}

TEST(FluxConfig, DetectsFluxDevFromDiffusersAndBflShapesWithoutData) {
  const auto dev = FluxConfig::fluxDev();
  // The diffusers key shapes of FLUX.1-dev, from the parameter plan plus the RMSNorm weights.
  std::map<std::string, std::vector<int64_t>> diffusers;
  const auto plan = fluxParamPlan(dev);
  auto addLinears = [&](const FluxBlockParams& b) {
    for (const auto& l : b.linears) {
      diffusers[l.path + ".weight"] = {l.outFeatures, l.inFeatures};
      diffusers[l.path + ".bias"] = {l.outFeatures};
    }
  };
  addLinears(plan.stem);
  addLinears(plan.head);
  for (const auto& b : plan.blocks) {
    addLinears(b);
    const std::vector<std::string> norms =
        b.kind == "double" ? std::vector<std::string>{"norm_q", "norm_k", "norm_added_q", "norm_added_k"}
                           : std::vector<std::string>{"norm_q", "norm_k"};
    for (const auto& n : norms) diffusers[b.id + ".attn." + n + ".weight"] = {dev.attentionHeadDim};
  }
  EXPECT_EQ(FluxConfig::fromShapes(diffusers), dev);

  // The same in BFL naming: fused rows add up.
  std::map<std::string, std::vector<int64_t>> bfl;
  for (const auto& [key, shape] : diffusers) {
    auto ref = bflParamForKey(key, dev);
    ASSERT_TRUE(ref) << key;
    auto s = shape;
    s[0] = ref->slot.totalRows;
    bfl[ref->key] = s;
  }
  EXPECT_EQ(bfl.at("double_blocks.18.img_attn.qkv.weight"), (std::vector<int64_t>{9216, 3072}));
  EXPECT_EQ(bfl.at("single_blocks.37.linear1.weight"), (std::vector<int64_t>{21504, 3072}));
  EXPECT_EQ(bfl.at("single_blocks.37.linear2.weight"), (std::vector<int64_t>{3072, 15360}));
  EXPECT_EQ(bfl.at("final_layer.adaLN_modulation.1.weight"), (std::vector<int64_t>{6144, 3072}));
  EXPECT_EQ(FluxConfig::fromShapes(bfl), dev);

  // schnell: no guidance embedder.
  for (auto it = bfl.begin(); it != bfl.end();)
    it = it->first.rfind("guidance_in.", 0) == 0 ? bfl.erase(it) : std::next(it);
  auto schnell = dev;
  schnell.guidanceEmbeds = false;
  EXPECT_EQ(FluxConfig::fromShapes(bfl), schnell);
  bfl.erase("img_in.weight");
  EXPECT_THROW(FluxConfig::fromShapes(bfl), strata::LoadError);
}

TEST(FluxNames, RowsFollowTheLayoutNotTheLeafName) {
  // An odd config (mlp ratio 3, 40 output channels): every slot's rows are the
  // Linear's out features, and a fused module's parts tile its rows.
  auto cfg = smallConfig();
  cfg.mlpRatio = 3.0;
  cfg.outChannels = 40;
  FluxTransformer model(cfg);
  std::map<std::string, std::vector<BflSlot>> byBfl;
  for (const auto& [path, linear] : model.linears()) {
    const auto slot = bflSlotForModule(path, cfg);
    ASSERT_TRUE(slot) << path;
    EXPECT_EQ(slot->rows, linear->outFeatures()) << path;
    byBfl[slot->module].push_back(*slot);
  }
  for (auto& [bfl, slots] : byBfl) {
    std::sort(slots.begin(), slots.end(), [](const auto& a, const auto& b) { return a.part < b.part; });
    int64_t rows = 0;
    for (const auto& s : slots) {
      EXPECT_EQ(s.parts, static_cast<int>(slots.size())) << bfl;
      EXPECT_EQ(s.rowOffset, rows) << bfl << " part " << s.part;
      rows += s.rows;
      EXPECT_EQ(s.totalRows, slots.front().totalRows) << bfl;
    }
    EXPECT_EQ(rows, slots.front().totalRows) << bfl;
  }
  EXPECT_EQ(bflSlotForModule("proj_out", cfg)->rows, 40);
  EXPECT_EQ(bflSlotForModule("single_transformer_blocks.0.proj_mlp", cfg)->rows, 3 * cfg.hiddenSize());
  EXPECT_EQ(bflParamForKey("transformer_blocks.0.attn.norm_added_k.weight", cfg)->slot.rows, cfg.attentionHeadDim);
}

TEST(FluxLoraRules, EveryLinearHasASlotInEveryFormAndReadsBack) {
  const auto cfg = smallConfig();
  const FluxLoraRules rules(cfg);
  FluxTransformer model(cfg);
  const auto linears = rules.linears();
  ASSERT_EQ(linears.size(), model.linears().size());
  for (size_t i = 0; i < linears.size(); ++i) {
    EXPECT_EQ(linears[i].path, model.linears()[i].first) << "the model's order";
    EXPECT_EQ(linears[i].outFeatures, model.linears()[i].second->outFeatures());
  }
  for (const auto format : rules.formats()) {
    for (const auto& l : linears) {
      const auto slot = rules.slotOf(l.path, format);
      ASSERT_TRUE(slot) << l.path << " " << strata::nn::toString(format);
      EXPECT_EQ(slot->rows, l.outFeatures) << l.path;
      if (format == strata::nn::LoraFileFormat::Diffusers) {
        EXPECT_EQ(slot->stem, "transformer." + l.path);
        EXPECT_FALSE(slot->fused());
      }
      const auto match = rules.matchStem(slot->stem);
      ASSERT_TRUE(match) << slot->stem;
      EXPECT_EQ(match->format, format) << slot->stem;
      bool found = false;
      for (const auto& [path, s] : match->modules) {
        if (path != l.path) continue;
        found = true;
        EXPECT_EQ(s.rowOffset, slot->rowOffset) << path;
        EXPECT_EQ(s.totalRows, slot->totalRows) << path;
        EXPECT_EQ(s.swapHalves, slot->swapHalves) << path;
      }
      EXPECT_TRUE(found) << slot->stem << " does not read back to " << l.path;
    }
  }
  EXPECT_EQ(rules.slotOf("single_transformer_blocks.1.proj_mlp", strata::nn::LoraFileFormat::Kohya)->stem,
            "lora_unet_single_blocks_1_linear1");
  EXPECT_EQ(rules.slotOf("proj_out", strata::nn::LoraFileFormat::Comfy)->stem, "diffusion_model.final_layer.linear");
  EXPECT_TRUE(rules.matchStem("lora_te1_text_model_encoder_layers_0_mlp_fc1")->modules.empty());
  EXPECT_TRUE(rules.matchStem("transformer.transformer_blocks.9.attn.to_q")->modules.empty());
  EXPECT_EQ(rules.matchStem("base_model.model.proj_out")->modules.at(0).first, "proj_out");
}
