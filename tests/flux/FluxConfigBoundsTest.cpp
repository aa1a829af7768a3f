// Shapes read from files are bounded before anything is sized by them, and a
// config.json that contradicts the weights' header is said, naming both (issue
// 32, point 5): num_layers 1e8, in_channels 2^40 and joint_attention_dim 64
// against 4096-wide weights were all accepted without a word.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxTransformer.h"

namespace fs = std::filesystem;
using namespace strata;
using flux::FluxConfig;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The ConfigError or LoadError message of `f`; fails the test when it returns.
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const LoadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(FluxConfigBounds, AbsurdShapesInConfigJsonAreRefusedNamingFileAndKey) {
  test::TempDir dir;
  const fs::path path = dir / "config.json";
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_layers", 100000000},
                                   {"num_single_layers", 100000000},
                                   {"in_channels", int64_t{1} << 40},
                                   {"joint_attention_dim", int64_t{1} << 40},
                                   {"num_attention_heads", 1000000000}}) {
    nlohmann::json j = FluxConfig::tiny().toDiffusersJson();
    j[key] = value;
    std::ofstream(path) << j.dump();
    const std::string e = errorOf([&] { FluxConfig::fromDiffusersJsonFile(path); });
    EXPECT_TRUE(contains(e, path.string())) << e;
    EXPECT_TRUE(contains(e, key)) << e;
    EXPECT_TRUE(contains(e, std::to_string(value))) << e;
  }
  // An integer past int64 is not read as a negative or small one.
  nlohmann::json j = FluxConfig::tiny().toDiffusersJson();
  j["num_layers"] = 18446744073709551615ULL;
  std::ofstream(path) << j.dump();
  const std::string e = errorOf([&] { FluxConfig::fromDiffusersJsonFile(path); });
  EXPECT_TRUE(contains(e, "num_layers")) << e;
}

TEST(FluxConfigBounds, BlockIndexInTheHeaderIsBoundedBeforeThePlan) {
  const FluxConfig cfg = FluxConfig::tiny();
  flux::FluxTransformer model(cfg);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : model.named_parameters(true)) shapes[p.key()] = p.value().sizes().vec();
  ASSERT_EQ(FluxConfig::fromShapes(shapes, cfg.axesDimsRope), cfg);
  for (const char* index : {"99999999", "99999999999999999999"}) {
    auto hostile = shapes;
    hostile[std::string("single_transformer_blocks.") + index + ".norm.linear.weight"] = {3, 3};
    const std::string e = errorOf([&] { FluxConfig::fromShapes(hostile, cfg.axesDimsRope); });
    EXPECT_TRUE(contains(e, "single")) << e;
  }
}

TEST(FluxConfigBounds, ConfigJsonContradictingTheWeightsIsSaidNamingBoth) {
  const FluxConfig cfg = FluxConfig::tiny();
  flux::FluxTransformer model(cfg);
  test::TempDir dir;
  const fs::path transformer = dir / "transformer";
  fs::create_directories(transformer);
  io::writeSafetensors(transformer / "diffusion_pytorch_model.safetensors", flux::diffusersStateDict(model));
  nlohmann::json j = cfg.toDiffusersJson();
  std::ofstream(transformer / "config.json") << j.dump();
  EXPECT_EQ(FluxConfig::fromCheckpoint(dir.path()), cfg);  // agreeing: read as before

  j["joint_attention_dim"] = cfg.jointAttentionDim / 2;
  j["num_layers"] = cfg.numLayers + 1;
  std::ofstream(transformer / "config.json") << j.dump();
  const std::string e = errorOf([&] { FluxConfig::fromCheckpoint(dir.path()); });
  EXPECT_TRUE(contains(e, (transformer / "config.json").string())) << e;
  EXPECT_TRUE(contains(e, transformer.string() + "/diffusion_pytorch_model.safetensors") || contains(e, "weights ("))
      << e;
  EXPECT_TRUE(contains(e, "joint_attention_dim is " + std::to_string(cfg.jointAttentionDim / 2) + " there, " +
                              std::to_string(cfg.jointAttentionDim) + " in the weights"))
      << e;
  EXPECT_TRUE(contains(e, "num_layers")) << e;
}
