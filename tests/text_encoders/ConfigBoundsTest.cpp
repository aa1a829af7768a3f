// T5 and CLIP config.json sizes are bounded before anything is sized by them
// (issue 32, point 5); each error names the key (and, from a file, the file).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "models/clip/ClipTextConfig.h"
#include "models/t5/T5Config.h"

using namespace strata;

namespace {

template <class Read>
void expectRefused(const nlohmann::json& good, const char* key, const nlohmann::json& value, Read read) {
  test::TempDir dir;
  nlohmann::json j = good;
  j[key] = value;
  std::ofstream(dir / "config.json") << j.dump();
  try {
    read(dir / "config.json");
    ADD_FAILURE() << key << " = " << value.dump() << " accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "config.json").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TextEncoderConfigBounds, AbsurdSizesAreRefusedNamingFileAndKey) {
  const auto t5 = [](const std::filesystem::path& p) { t5::T5Config::fromTransformersJsonFile(p); };
  const nlohmann::json t5Good = nlohmann::json::parse(
      R"({"model_type": "t5", "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4,
          "vocab_size": 100, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
          "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new"})");
  ASSERT_NO_THROW(t5::T5Config::fromTransformersJson(t5Good));
  expectRefused(t5Good, "num_layers", 1000000000, t5);
  expectRefused(t5Good, "vocab_size", int64_t{1} << 40, t5);
  expectRefused(t5Good, "d_ff", int64_t{1} << 40, t5);
  expectRefused(t5Good, "relative_attention_num_buckets", 18446744073709551615ULL, t5);

  const auto clip = [](const std::filesystem::path& p) { clip::ClipTextConfig::fromTransformersJsonFile(p); };
  const nlohmann::json clipGood = nlohmann::json::parse(
      R"({"model_type": "clip_text_model", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 16,
          "hidden_act": "gelu"})");
  ASSERT_NO_THROW(clip::ClipTextConfig::fromTransformersJson(clipGood));
  expectRefused(clipGood, "num_hidden_layers", 1000000000, clip);
  expectRefused(clipGood, "max_position_embeddings", int64_t{1} << 40, clip);
  expectRefused(clipGood, "hidden_size", int64_t{1} << 40, clip);
}
