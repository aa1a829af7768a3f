// VaeConfig from diffusers config.json and from tensor shapes (diffusers and ldm names).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "models/vae/VaeConfig.h"
#include "models/vae/VaeNames.h"
#include "vae/VaeTestConfigs.h"

using namespace strata;
using namespace strata::vae;

namespace {

std::vector<VaeConfig> allConfigs() {
  return {VaeConfig::flux1(), VaeConfig::sd1(), tiny::fluxLayout(), tiny::sdLayout(), tiny::oddLayout()};
}

std::map<std::string, std::vector<int64_t>> ldmShapes(const VaeConfig& cfg) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [key, shape] : vaeParamShapes(cfg))
    out[*names::fileKey(key, VaeWeightFormat::Ldm, cfg.numBlocks())] =
        names::fileShape(key, shape, VaeWeightFormat::Ldm);
  return out;
}

template <class Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(VaeConfig, FluxDevConfigJsonIsTheFlux1Preset) {
  // FLUX.1-dev's vae/config.json.
  const auto j = nlohmann::json::parse(R"({
    "_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0.dev0", "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"],
    "force_upcast": true, "in_channels": 3, "latent_channels": 16, "latents_mean": null, "latents_std": null,
    "layers_per_block": 2, "mid_block_add_attention": true, "norm_num_groups": 32, "out_channels": 3,
    "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159,
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"],
    "use_post_quant_conv": false, "use_quant_conv": false})");
  EXPECT_EQ(VaeConfig::fromDiffusersJson(j), VaeConfig::flux1());
  EXPECT_EQ(VaeConfig::flux1().downscaleFactor(), 8);
}

TEST(VaeConfig, AbsentKeysTakeDiffusersDefaults) {
  const auto c = VaeConfig::fromDiffusersJson(nlohmann::json::object());
  EXPECT_EQ(c.blockOutChannels, std::vector<int64_t>{64});
  EXPECT_EQ(c.layersPerBlock, 1);
  EXPECT_EQ(c.latentChannels, 4);
  EXPECT_EQ(c.normNumGroups, 32);
  EXPECT_TRUE(c.useQuantConv);
  EXPECT_TRUE(c.usePostQuantConv);
  EXPECT_DOUBLE_EQ(c.scalingFactor, 0.18215);
  EXPECT_DOUBLE_EQ(c.shiftFactor, 0.0);
  // shift_factor null is 0; sample_size may be [h, w].
  const auto sd =
      VaeConfig::fromDiffusersJson(nlohmann::json::parse(R"({"shift_factor": null, "sample_size": [768, 768]})"));
  EXPECT_DOUBLE_EQ(sd.shiftFactor, 0.0);
  EXPECT_EQ(sd.sampleSize, 768);
}

TEST(VaeConfig, DiffusersJsonRoundTrips) {
  for (const auto& cfg : allConfigs()) EXPECT_EQ(VaeConfig::fromDiffusersJson(cfg.toDiffusersJson()), cfg);
}

TEST(VaeConfig, UnsupportedConfigsAreRefusedByKey) {
  auto refuse = [](const std::string& text, const std::string& needle) {
    const std::string msg = errorOf([&] { VaeConfig::fromDiffusersJson(nlohmann::json::parse(text)); });
    EXPECT_NE(msg.find(needle), std::string::npos) << text << " -> " << msg;
  };
  refuse(R"({"act_fn": "relu"})", "'act_fn'");
  refuse(R"({"block_out_channels": [8, 16], "down_block_types": ["DownEncoderBlock2D", "AttnDownEncoderBlock2D"]})",
         "AttnDownEncoderBlock2D");
  refuse(R"({"block_out_channels": [8, 16], "up_block_types": ["UpDecoderBlock2D"]})", "'up_block_types'");
  refuse(R"({"latents_mean": [0.1, 0.2, 0.3, 0.4]})", "'latents_mean'");
  refuse(R"({"_class_name": "AutoencoderTiny"})", "AutoencoderTiny");
  refuse(R"({"block_out_channels": "wide"})", "'block_out_channels'");
  refuse(R"({"block_out_channels": [8, 20], "norm_num_groups": 8})", "not divisible by norm_num_groups");
  refuse(R"({"layers_per_block": 0})", "layers_per_block");
  refuse(R"({"scaling_factor": -1})", "scaling_factor");
  EXPECT_THROW(VaeConfig::fromDiffusersJson(nlohmann::json::array()), ConfigError);
}

TEST(VaeConfig, ConfigFileErrorsNameTheFile) {
  strata::test::TempDir dir;
  EXPECT_NE(errorOf([&] { VaeConfig::fromDiffusersJsonFile(dir / "missing.json"); }).find("missing.json"),
            std::string::npos);
  std::ofstream(dir / "bad.json") << "{ not json";
  EXPECT_NE(errorOf([&] { VaeConfig::fromDiffusersJsonFile(dir / "bad.json"); }).find("bad.json"), std::string::npos);
  std::ofstream(dir / "relu.json") << R"({"act_fn": "relu"})";
  const auto msg = errorOf([&] { VaeConfig::fromDiffusersJsonFile(dir / "relu.json"); });
  EXPECT_NE(msg.find("relu.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("act_fn"), std::string::npos) << msg;
}

TEST(VaeConfig, DetectedFromShapesInBothNamings) {
  for (const auto& cfg : allConfigs()) {
    SCOPED_TRACE(cfg.toDiffusersJson().dump());
    const auto hints = VaeHints::of(cfg);
    EXPECT_EQ(vaeConfigFromShapes(vaeParamShapes(cfg), hints), cfg);
    EXPECT_EQ(vaeConfigFromShapes(ldmShapes(cfg), hints), cfg);
  }
  // Without hints: 32 groups, and FLUX.1's factors for 16 latent channels, SD's for 4.
  EXPECT_EQ(vaeConfigFromShapes(ldmShapes(VaeConfig::flux1())), VaeConfig::flux1());
  EXPECT_EQ(vaeConfigFromShapes(vaeParamShapes(VaeConfig::sd1())), VaeConfig::sd1());
}

TEST(VaeConfig, ShapeDetectionNamesTheMissingTensorAsTheFileNamesIt) {
  const auto cfg = tiny::sdLayout();
  auto ldm = ldmShapes(cfg);
  ldm.erase("encoder.down.0.block.0.conv1.weight");
  auto msg = errorOf([&] { vaeConfigFromShapes(ldm, VaeHints::of(cfg)); });
  EXPECT_NE(msg.find("'encoder.down.0.block.0.conv1.weight'"), std::string::npos) << msg;

  auto diffusers = vaeParamShapes(cfg);
  diffusers.erase("decoder.conv_in.weight");
  msg = errorOf([&] { vaeConfigFromShapes(diffusers, VaeHints::of(cfg)); });
  EXPECT_NE(msg.find("'decoder.conv_in.weight'"), std::string::npos) << msg;

  diffusers = vaeParamShapes(cfg);
  diffusers["encoder.conv_in.weight"] = {4, 3};
  msg = errorOf([&] { vaeConfigFromShapes(diffusers, VaeHints::of(cfg)); });
  EXPECT_NE(msg.find("expected rank 4"), std::string::npos) << msg;

  // 32 groups (the default) cannot split this model's 4 channels: said, not guessed around.
  msg = errorOf([&] { vaeConfigFromShapes(vaeParamShapes(cfg)); });
  EXPECT_NE(msg.find("norm_num_groups"), std::string::npos) << msg;
}

TEST(VaeConfig, ParamCountIsTheSumOfTheShapes) {
  const auto cfg = tiny::fluxLayout();
  int64_t total = 0;
  for (const auto& [key, shape] : vaeParamShapes(cfg)) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    total += n;
  }
  EXPECT_EQ(vaeParamCount(cfg), total);
  EXPECT_GT(vaeParamCount(VaeConfig::flux1()), vaeParamCount(cfg));
  EXPECT_THROW(VaeConfig::preset("sdxl-turbo"), ConfigError);
  EXPECT_EQ(VaeConfig::preset("flux1"), VaeConfig::flux1());
}
