// VAE config.json sizes are bounded before anything is sized by them (issue 32,
// point 5); each error names the file and the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "models/vae/VaeConfig.h"

using namespace strata;

TEST(VaeConfigBounds, AbsurdSizesAreRefusedNamingFileAndKey) {
  test::TempDir dir;
  const auto path = dir / "config.json";
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"block_out_channels", nlohmann::json::array({128, int64_t{1} << 40})},
      {"latent_channels", int64_t{1} << 40},
      {"layers_per_block", 100000000},
      {"sample_size", nlohmann::json::array({18446744073709551615ULL, 8})},
      {"norm_num_groups", 18446744073709551615ULL}};
  for (const auto& [key, value] : cases) {
    nlohmann::json j = vae::VaeConfig::flux1().toDiffusersJson();
    j[key] = value;
    std::ofstream(path, std::ios::trunc) << j.dump();
    try {
      vae::VaeConfig::fromDiffusersJsonFile(path);
      ADD_FAILURE() << key << " = " << value.dump() << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}
