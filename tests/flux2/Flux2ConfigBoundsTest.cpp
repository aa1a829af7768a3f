// FLUX.2: config.json's shapes are bounded as they are read, and a config.json
// that contradicts the weights' header is said naming both files (issue 32,
// point 5); before, the weights' shapes silently won.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "flux2/Flux2TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"

namespace fs = std::filesystem;
using namespace strata;
using flux2::Flux2Config;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Flux2ConfigBounds, AbsurdShapesAndContradictionsNameFileAndKey) {
  const Flux2Config cfg = flux2::test::otherConfig();
  flux2::Flux2Transformer model(cfg);
  test::TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : model.named_parameters(true)) tensors.emplace_back(p.key(), p.value().detach().clone());
  io::writeSafetensors(dir / "diffusion_pytorch_model.safetensors", tensors);
  const fs::path configJson = dir / "config.json";
  nlohmann::json j = cfg.toDiffusersJson();
  std::ofstream(configJson) << j.dump();
  EXPECT_EQ(flux2::flux2ConfigFromCheckpoint(dir.path()), cfg);  // agreeing: read as before

  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"num_layers", 100000000}, {"in_channels", int64_t{1} << 40}}) {
    nlohmann::json bad = j;
    bad[key] = value;
    std::ofstream(configJson, std::ios::trunc) << bad.dump();
    try {
      flux2::flux2ConfigFromCheckpoint(dir.path());
      ADD_FAILURE() << key << " " << value << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), configJson.string())) << e.what();
      EXPECT_TRUE(contains(e.what(), key)) << e.what();
    }
  }
  nlohmann::json other = j;
  other["joint_attention_dim"] = cfg.jointAttentionDim * 2;
  std::ofstream(configJson, std::ios::trunc) << other.dump();
  try {
    flux2::flux2ConfigFromCheckpoint(dir.path());
    ADD_FAILURE() << "a contradicting config.json was accepted";
  } catch (const LoadError& e) {
    EXPECT_TRUE(contains(e.what(), configJson.string() + " contradicts the weights")) << e.what();
    EXPECT_TRUE(contains(e.what(), "joint_attention_dim is " + std::to_string(cfg.jointAttentionDim * 2))) << e.what();
  }
}
