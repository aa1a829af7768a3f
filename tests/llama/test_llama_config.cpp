// LlamaConfig from config.json: both rope forms, the family differences (Qwen2's
// q/k/v bias, Mistral's sliding window, tied embeddings) and errors that name
// the file and the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "models/llama/LlamaConfig.h"
#include "models/llama/LlamaForCausalLM.h"

using namespace strata;
using namespace strata::llama;
using nlohmann::json;

namespace {

json base() {
  return json{{"model_type", "llama"},        {"vocab_size", 128},      {"hidden_size", 32},
              {"intermediate_size", 64},      {"num_hidden_layers", 2}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2},     {"rms_norm_eps", 1e-5},   {"hidden_act", "silu"},
              {"tie_word_embeddings", false}, {"rope_theta", 10000.0},  {"rope_scaling", nullptr}};
}

// The message of the ConfigError `j` raises.
std::string errorOf(const json& j) {
  try {
    LlamaConfig::fromJson(j, "/models/x/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(LlamaConfig, ReadsTheTransformersKeys) {
  const LlamaConfig c = LlamaConfig::fromJson(base());
  EXPECT_EQ(c.vocabSize, 128);
  EXPECT_EQ(c.hiddenSize, 32);
  EXPECT_EQ(c.numKeyValueHeads, 2);
  EXPECT_EQ(c.headDim, 8);  // hidden / heads when head_dim is absent
  EXPECT_EQ(c.kvDim(), 16);
  EXPECT_FALSE(c.qkvBias);
  EXPECT_EQ(c.ropeScaling.type, RopeType::Default);
  json noKv = base();
  noKv.erase("num_key_value_heads");
  EXPECT_EQ(LlamaConfig::fromJson(noKv).numKeyValueHeads, 4);  // plain multi-head attention
}

TEST(LlamaConfig, RopeParametersAndRopeScalingAreTheSame) {
  json v5 = base();
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 8.0},           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  json v4 = base();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  const auto a = LlamaConfig::fromJson(v5), b = LlamaConfig::fromJson(v4);
  EXPECT_EQ(a.ropeScaling.type, RopeType::Llama3);
  EXPECT_EQ(a.toJson(), b.toJson());
  EXPECT_DOUBLE_EQ(a.ropeTheta, 500000.0);
  // And back through toJson.
  EXPECT_EQ(LlamaConfig::fromJson(a.toJson()).toJson(), a.toJson());
}

TEST(LlamaConfig, Llama3RuleKeepsHighFrequenciesAndDividesLowOnes) {
  LlamaConfig c = LlamaConfig::llama3_8b();
  const auto scaled = ropeInvFreq(c);
  c.ropeScaling = RopeScaling{};
  const auto plain = ropeInvFreq(c);
  ASSERT_EQ(scaled.size(0), 64);
  const double lowWavelen = 8192 / 1.0, highWavelen = 8192 / 4.0;
  int high = 0, low = 0, medium = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = plain[i].item<double>(), s = scaled[i].item<double>();
    const double wavelen = 2 * M_PI / f;
    if (wavelen < highWavelen) {
      EXPECT_FLOAT_EQ(s, f) << i;
      ++high;
    } else if (wavelen > lowWavelen) {
      EXPECT_FLOAT_EQ(s, f / 8) << i;
      ++low;
    } else {
      EXPECT_LT(s, f) << i;
      EXPECT_GT(s, f / 8) << i;
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
  // Linear scaling divides every frequency.
  c.ropeScaling = RopeScaling{RopeType::Linear, 2.0};
  EXPECT_TRUE(at::allclose(ropeInvFreq(c), plain / 2));
}

TEST(LlamaConfig, FamilyDifferences) {
  json qwen = base();
  qwen["model_type"] = "qwen2";
  qwen["tie_word_embeddings"] = true;
  const auto q = LlamaConfig::fromJson(qwen);
  EXPECT_TRUE(q.qkvBias);
  EXPECT_FALSE(q.outputBias);
  EXPECT_TRUE(q.tieWordEmbeddings);
  qwen["use_sliding_window"] = true;
  EXPECT_NE(errorOf(qwen).find("key 'use_sliding_window'"), std::string::npos) << errorOf(qwen);

  json llama = base();
  llama["attention_bias"] = true;
  const auto l = LlamaConfig::fromJson(llama);
  EXPECT_TRUE(l.qkvBias);
  EXPECT_TRUE(l.outputBias);

  json mistral = base();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = nullptr;
  EXPECT_FALSE(LlamaConfig::fromJson(mistral).slidingWindow.has_value());
  mistral["sliding_window"] = 4096;
  EXPECT_EQ(LlamaConfig::fromJson(mistral).slidingWindow.value_or(0), 4096);
}

TEST(LlamaConfig, ErrorsNameTheFileAndTheKey) {
  json j = base();
  j.erase("hidden_size");
  EXPECT_NE(errorOf(j).find("/models/x/config.json: key 'hidden_size': missing"), std::string::npos) << errorOf(j);
  j = base();
  j["num_hidden_layers"] = "two";
  EXPECT_NE(errorOf(j).find("key 'num_hidden_layers': expected an integer"), std::string::npos) << errorOf(j);
  j = base();
  j["model_type"] = "gpt2";
  EXPECT_NE(errorOf(j).find("key 'model_type': 'gpt2'"), std::string::npos) << errorOf(j);
  j = base();
  j.erase("model_type");
  EXPECT_NE(errorOf(j).find("key 'model_type'"), std::string::npos) << errorOf(j);
  j = base();
  j["hidden_act"] = "gelu";
  EXPECT_NE(errorOf(j).find("key 'hidden_act'"), std::string::npos) << errorOf(j);
  j = base();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(errorOf(j).find("key 'num_key_value_heads'"), std::string::npos) << errorOf(j);
  j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(errorOf(j).find("key 'rope_scaling.rope_type': 'yarn'"), std::string::npos) << errorOf(j);
  j = base();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  EXPECT_NE(errorOf(j).find("key 'rope_scaling.original_max_position_embeddings': missing"), std::string::npos)
      << errorOf(j);
  j = base();
  j["tie_word_embeddings"] = 1;
  EXPECT_NE(errorOf(j).find("key 'tie_word_embeddings': expected true or false"), std::string::npos) << errorOf(j);
  j = base();
  j["head_dim"] = 7;
  EXPECT_NE(errorOf(j).find("key 'head_dim'"), std::string::npos) << errorOf(j);
}

TEST(LlamaConfig, FileErrors) {
  test::TempDir dir;
  EXPECT_THROW(LlamaConfig::fromFile(dir.path()), IoError);  // no config.json
  std::ofstream(dir / "config.json") << "{ not json";
  try {
    LlamaConfig::fromFile(dir.path());
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "config.json").string()), std::string::npos) << e.what();
  }
  json j = base();
  j.erase("vocab_size");
  std::ofstream(dir / "config.json", std::ios::trunc) << j.dump();
  try {
    LlamaConfig::fromFile(dir.path());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "config.json").string() + ": key 'vocab_size'"), std::string::npos)
        << e.what();
  }
}

TEST(LlamaConfig, ParamPlanOfThe8BShape) {
  const LlamaConfig c = LlamaConfig::llama3_8b();
  const LlamaParamPlan p = llamaParamPlan(c);
  ASSERT_EQ(p.blocks.size(), 32u);
  // q 4096x4096, k and v 4096x1024, o 4096x4096, gate/up/down 4096x14336, two norms.
  const int64_t layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096;
  EXPECT_EQ(p.blocks[0].paramCount, layer);
  EXPECT_EQ(p.stem.paramCount, 128256LL * 4096);
  EXPECT_EQ(p.head.paramCount, 4096 + 128256LL * 4096);
  EXPECT_EQ(p.totalParams(), 8030261248LL);  // Llama-3-8B's published count
  EXPECT_DOUBLE_EQ(llamaActivationElementsPerTokenPerHidden(c), 27.75);
}

// Issue 32: num_hidden_layers 1e9 made `plan` allocate 15 GB before bad_alloc.
// Every size is bounded in the config, before a plan or a model is sized by it.
TEST(LlamaConfig, AbsurdSizesAreRefusedBeforeAnythingIsSized) {
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_hidden_layers", 1000000000},
                                   {"vocab_size", 1000000000000},
                                   {"hidden_size", int64_t{1} << 40},
                                   {"intermediate_size", int64_t{1} << 40},
                                   {"max_position_embeddings", int64_t{1} << 40}}) {
    json j = base();
    j[key] = value;
    const std::string e = errorOf(j);
    EXPECT_NE(e.find("/models/x/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(key), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(value)), std::string::npos) << e;
  }
  json j = base();
  j["num_hidden_layers"] = 1000000000;
  EXPECT_THROW(llamaParamPlan(LlamaConfig::fromJson(j)), ConfigError);
}
