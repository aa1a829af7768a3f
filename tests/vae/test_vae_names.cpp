// The diffusers <-> ldm (ae.safetensors) <-> legacy diffusers key rules, both ways.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "models/vae/VaeConfig.h"
#include "models/vae/VaeNames.h"
#include "vae/VaeTestConfigs.h"

using namespace strata::vae;
using namespace strata::vae::names;

namespace {

std::vector<VaeConfig> allConfigs() {
  return {VaeConfig::flux1(), VaeConfig::sd1(), tiny::fluxLayout(), tiny::sdLayout(), tiny::oddLayout()};
}

// Every parameter key in `format`, and back.
void expectRoundTrip(const VaeConfig& cfg, VaeWeightFormat format) {
  std::set<std::string> fileKeys;
  for (const auto& [key, shape] : vaeParamShapes(cfg)) {
    const auto fk = fileKey(key, format, cfg.numBlocks());
    ASSERT_TRUE(fk) << key << " has no " << toString(format) << " name";
    EXPECT_TRUE(fileKeys.insert(*fk).second) << "two parameters map to " << *fk;
    const auto back = diffusersKey(*fk, format, cfg.numBlocks());
    ASSERT_TRUE(back) << *fk;
    EXPECT_EQ(*back, key) << *fk;
  }
}

}  // namespace

TEST(VaeNames, LdmNamesOfFluxAe) {
  const int64_t n = VaeConfig::flux1().numBlocks();
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"encoder.conv_in.weight", "encoder.conv_in.weight"},
      {"encoder.down_blocks.0.resnets.1.norm1.weight", "encoder.down.0.block.1.norm1.weight"},
      {"encoder.down_blocks.1.resnets.0.conv_shortcut.weight", "encoder.down.1.block.0.nin_shortcut.weight"},
      {"encoder.down_blocks.2.downsamplers.0.conv.bias", "encoder.down.2.downsample.conv.bias"},
      {"encoder.mid_block.resnets.0.conv2.weight", "encoder.mid.block_1.conv2.weight"},
      {"encoder.mid_block.resnets.1.norm2.bias", "encoder.mid.block_2.norm2.bias"},
      {"encoder.mid_block.attentions.0.group_norm.weight", "encoder.mid.attn_1.norm.weight"},
      {"encoder.mid_block.attentions.0.to_q.weight", "encoder.mid.attn_1.q.weight"},
      {"encoder.mid_block.attentions.0.to_k.bias", "encoder.mid.attn_1.k.bias"},
      {"encoder.mid_block.attentions.0.to_v.weight", "encoder.mid.attn_1.v.weight"},
      {"encoder.mid_block.attentions.0.to_out.0.weight", "encoder.mid.attn_1.proj_out.weight"},
      {"encoder.conv_norm_out.bias", "encoder.norm_out.bias"},
      {"encoder.conv_out.weight", "encoder.conv_out.weight"},
      {"decoder.conv_in.bias", "decoder.conv_in.bias"},
      {"decoder.mid_block.attentions.0.to_out.0.bias", "decoder.mid.attn_1.proj_out.bias"},
      // ldm counts the decoder levels from the latent side's far end.
      {"decoder.up_blocks.0.resnets.2.conv1.weight", "decoder.up.3.block.2.conv1.weight"},
      {"decoder.up_blocks.0.upsamplers.0.conv.weight", "decoder.up.3.upsample.conv.weight"},
      {"decoder.up_blocks.2.resnets.0.conv_shortcut.bias", "decoder.up.1.block.0.nin_shortcut.bias"},
      {"decoder.up_blocks.3.resnets.1.norm2.weight", "decoder.up.0.block.1.norm2.weight"},
      {"decoder.conv_norm_out.weight", "decoder.norm_out.weight"},
      {"quant_conv.weight", "quant_conv.weight"},
      {"post_quant_conv.bias", "post_quant_conv.bias"},
  };
  for (const auto& [diffusers, ldm] : pairs) {
    EXPECT_EQ(fileKey(diffusers, VaeWeightFormat::Ldm, n).value_or("<none>"), ldm) << diffusers;
    EXPECT_EQ(diffusersKey(ldm, VaeWeightFormat::Ldm, n).value_or("<none>"), diffusers) << ldm;
  }
  // The reversal depends on the level count.
  EXPECT_EQ(fileKey("decoder.up_blocks.0.resnets.0.conv1.weight", VaeWeightFormat::Ldm, 2).value_or(""),
            "decoder.up.1.block.0.conv1.weight");
}

TEST(VaeNames, EveryParameterRoundTripsInEveryFormat) {
  for (const auto& cfg : allConfigs()) {
    SCOPED_TRACE(cfg.toDiffusersJson().dump());
    expectRoundTrip(cfg, VaeWeightFormat::Ldm);
    expectRoundTrip(cfg, VaeWeightFormat::DiffusersLegacyAttention);
    expectRoundTrip(cfg, VaeWeightFormat::Diffusers);
  }
}

TEST(VaeNames, LegacyDiffusersAttentionNames) {
  EXPECT_EQ(fileKey("decoder.mid_block.attentions.0.to_out.0.weight", VaeWeightFormat::DiffusersLegacyAttention, 4)
                .value_or(""),
            "decoder.mid_block.attentions.0.proj_attn.weight");
  EXPECT_EQ(diffusersKey("encoder.mid_block.attentions.0.query.bias", VaeWeightFormat::DiffusersLegacyAttention, 4)
                .value_or(""),
            "encoder.mid_block.attentions.0.to_q.bias");
  // Everything else keeps its name.
  EXPECT_EQ(diffusersKey("encoder.conv_in.weight", VaeWeightFormat::DiffusersLegacyAttention, 4).value_or(""),
            "encoder.conv_in.weight");
}

TEST(VaeNames, KeysNoRuleCoversAreRefused) {
  EXPECT_FALSE(fileKey("encoder.something.weight", VaeWeightFormat::Ldm, 4));
  EXPECT_FALSE(fileKey("encoder.conv_in", VaeWeightFormat::Ldm, 4)) << "no parameter name after the module";
  EXPECT_FALSE(fileKey("encoder.down_blocks.4.resnets.0.conv1.weight", VaeWeightFormat::Ldm, 4)) << "level 4 of 4";
  EXPECT_FALSE(diffusersKey("decoder.up.4.block.0.conv1.weight", VaeWeightFormat::Ldm, 4));
  EXPECT_FALSE(diffusersKey("encoder.down.01.block.0.conv1.weight", VaeWeightFormat::Ldm, 4));
  EXPECT_FALSE(diffusersKey("encoder.down.x.block.0.conv1.weight", VaeWeightFormat::Ldm, 4));
  EXPECT_FALSE(diffusersKey("model.diffusion_model.x.weight", VaeWeightFormat::Ldm, 4));
}

TEST(VaeNames, DetectsTheNaming) {
  EXPECT_EQ(detectFormat({"encoder.conv_in.weight", "encoder.down.0.block.0.conv1.weight"}), VaeWeightFormat::Ldm);
  EXPECT_EQ(detectFormat({"decoder.mid.attn_1.q.weight"}), VaeWeightFormat::Ldm);
  EXPECT_EQ(detectFormat({"encoder.conv_in.weight", "encoder.mid_block.attentions.0.query.weight"}),
            VaeWeightFormat::DiffusersLegacyAttention);
  EXPECT_EQ(detectFormat({"encoder.conv_in.weight", "encoder.mid_block.attentions.0.to_q.weight"}),
            VaeWeightFormat::Diffusers);
  EXPECT_EQ(ldmBlockCount({"encoder.down.0.block.0.conv1.weight", "decoder.up.3.upsample.conv.bias"}), 4);
  EXPECT_EQ(ldmBlockCount({"encoder.conv_in.weight"}), 0);
}

TEST(VaeNames, LdmShapesOfTheAttentionProjections) {
  EXPECT_EQ(fileShape("encoder.mid_block.attentions.0.to_q.weight", {512, 512}, VaeWeightFormat::Ldm),
            (std::vector<int64_t>{512, 512, 1, 1}));
  EXPECT_EQ(fileShape("encoder.mid_block.attentions.0.to_q.bias", {512}, VaeWeightFormat::Ldm),
            (std::vector<int64_t>{512}));
  EXPECT_EQ(fileShape("encoder.mid_block.attentions.0.to_q.weight", {512, 512}, VaeWeightFormat::Diffusers),
            (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(fileShape("encoder.conv_in.weight", {128, 3, 3, 3}, VaeWeightFormat::Ldm),
            (std::vector<int64_t>{128, 3, 3, 3}));
}

TEST(VaeNames, LdmShapeMapConvertsBackToTheDiffusersShapeMap) {
  for (const auto& cfg : allConfigs()) {
    const auto shapes = vaeParamShapes(cfg);
    std::map<std::string, std::vector<int64_t>> ldm;
    for (const auto& [key, shape] : shapes)
      ldm[*fileKey(key, VaeWeightFormat::Ldm, cfg.numBlocks())] = fileShape(key, shape, VaeWeightFormat::Ldm);
    EXPECT_EQ(toDiffusersShapes(ldm), shapes);
    EXPECT_EQ(toDiffusersShapes(shapes), shapes);
  }
}
