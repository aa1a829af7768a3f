// The peft adapter folder: read (scale lora_alpha / r, rslora, rank_pattern and
// alpha_pattern by peft's rule) and written back, with errors naming the file and key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/llama/LlamaForCausalLM.h"
#include "lora/PeftAdapter.h"

using namespace strata;
using namespace strata::llama;
using namespace strata::lora;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kQ = "base_model.model.model.layers.0.self_attn.q_proj";
const std::string kV = "base_model.model.model.layers.1.self_attn.v_proj";

json peftConfig() {
  return json{{"peft_type", "LORA"},
              {"r", 4},
              {"lora_alpha", 8},
              {"target_modules", {"q_proj", "v_proj"}},
              {"use_rslora", false},
              {"use_dora", false},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"modules_to_save", nullptr}};
}

// A folder with adapters on layer 0's q_proj (rank 4) and layer 1's v_proj (rank `vRank`).
void writeFolder(const fs::path& dir, const json& cfg, int64_t vRank = 4,
                 std::vector<std::pair<std::string, at::Tensor>> extra = {}) {
  std::vector<std::pair<std::string, at::Tensor>> t = {
      {kQ + ".lora_A.weight", at::randn({4, 32})},
      {kQ + ".lora_B.weight", at::randn({32, 4})},
      {kV + ".lora_A.weight", at::randn({vRank, 32})},
      {kV + ".lora_B.weight", at::randn({16, vRank})},
  };
  for (auto& e : extra) t.push_back(std::move(e));
  io::writeSafetensors(dir / "adapter_model.safetensors", t, {{"format", "pt"}});
  std::ofstream(dir / "adapter_config.json", std::ios::trunc) << cfg.dump();
}

template <class E>
std::string errorOf(const fs::path& dir) {
  try {
    readPeftAdapter(dir);
  } catch (const E& e) {
    return e.what();
  }
  return "(no error of that type)";
}

}  // namespace

TEST(LlamaPeft, ReadsScalePerModuleAndRslora) {
  test::TempDir dir;
  writeFolder(dir.path(), peftConfig());
  auto w = readPeftAdapter(dir.path());
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].modulePath, "model.layers.0.self_attn.q_proj");
  EXPECT_DOUBLE_EQ(w[0].alpha / w[0].down.size(0), 2.0);

  json cfg = peftConfig();
  cfg["use_rslora"] = true;
  writeFolder(dir.path(), cfg);
  w = readPeftAdapter(dir.path());
  EXPECT_DOUBLE_EQ(w[0].alpha / w[0].down.size(0), 8.0 / 2.0);  // alpha / sqrt(4)

  cfg = peftConfig();
  cfg["rank_pattern"] = {{"v_proj", 2}};
  cfg["alpha_pattern"] = {{"layers.1.self_attn.v_proj", 1}};
  writeFolder(dir.path(), cfg, /*vRank=*/2);
  w = readPeftAdapter(dir.path());
  EXPECT_EQ(w[1].down.size(0), 2);
  EXPECT_DOUBLE_EQ(w[1].alpha / 2, 0.5);
  EXPECT_DOUBLE_EQ(w[0].alpha / 4, 2.0);  // q_proj keeps r and lora_alpha

  // The adapters attach to the model's Linears by path.
  LlamaForCausalLM model(LlamaConfig::tiny());
  auto net = loadPeftAdapter(model, dir.path());
  EXPECT_EQ(net->adapters().size(), 2u);
  EXPECT_NE(net->adapter("model.layers.1.self_attn.v_proj"), nullptr);
}

TEST(LlamaPeft, ErrorsNameTheFileAndTheKey) {
  test::TempDir dir;
  EXPECT_NE(errorOf<IoError>(dir.path()).find("adapter_config.json"), std::string::npos);
  json cfg = peftConfig();
  cfg["peft_type"] = "IA3";
  writeFolder(dir.path(), cfg);
  EXPECT_NE(errorOf<ConfigError>(dir.path()).find("key 'peft_type'"), std::string::npos);
  cfg = peftConfig();
  cfg["use_dora"] = true;
  writeFolder(dir.path(), cfg);
  EXPECT_NE(errorOf<ConfigError>(dir.path()).find("key 'use_dora'"), std::string::npos);
  cfg = peftConfig();
  cfg["modules_to_save"] = {"lm_head"};
  writeFolder(dir.path(), cfg);
  EXPECT_NE(errorOf<ConfigError>(dir.path()).find("key 'modules_to_save'"), std::string::npos);
  cfg = peftConfig();
  cfg.erase("lora_alpha");
  writeFolder(dir.path(), cfg);
  EXPECT_NE(errorOf<ConfigError>(dir.path()).find("key 'lora_alpha': missing"), std::string::npos);

  writeFolder(dir.path(), peftConfig(), 2);  // the config says r 4
  std::string msg = errorOf<LoadError>(dir.path());
  EXPECT_NE(msg.find(kV + "' has rank 2"), std::string::npos) << msg;
  writeFolder(dir.path(), peftConfig(), 4, {{"base_model.model.lm_head.weight", at::randn({96, 32})}});
  msg = errorOf<LoadError>(dir.path());
  EXPECT_NE(msg.find("adapter_model.safetensors: tensor 'base_model.model.lm_head.weight' is not a LoRA weight"),
            std::string::npos)
      << msg;
  writeFolder(dir.path(), peftConfig(), 4,
              {{"base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", at::randn({4, 32})}});
  msg = errorOf<LoadError>(dir.path());
  EXPECT_NE(msg.find("up_proj.lora_A.weight' has no lora_B partner"), std::string::npos) << msg;

  // A module the model does not have: the folder is named.
  writeFolder(dir.path(), peftConfig(), 4,
              {{"base_model.model.model.layers.9.mlp.up_proj.lora_A.weight", at::randn({4, 32})},
               {"base_model.model.model.layers.9.mlp.up_proj.lora_B.weight", at::randn({48, 4})}});
  LlamaForCausalLM model(LlamaConfig::tiny());
  try {
    loadPeftAdapter(model, dir.path());
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.layers.9.mlp.up_proj"), std::string::npos) << e.what();
  }
}

TEST(LlamaPeft, WrittenAsPeftWritesAndReadBack) {
  torch::manual_seed(9);
  std::vector<lora::LoraModuleWeights> mods = {
      {"model.layers.0.self_attn.q_proj", at::randn({4, 32}), at::randn({32, 4}), 8.0},
      {"model.layers.0.self_attn.v_proj", at::randn({4, 32}), at::randn({16, 4}), 8.0},
      {"model.layers.1.self_attn.q_proj", at::randn({2, 32}), at::randn({32, 2}), 3.0},
  };
  test::TempDir dir;
  PeftWriteOptions o;
  o.baseModelNameOrPath = "meta-llama/Llama-3.1-8B";
  LlamaForCausalLM model(LlamaConfig::tiny());
  for (const auto& [p, _] : model.linears()) o.modelLinearPaths.push_back(p);
  writePeftAdapter(dir.path(), mods, o);

  std::ifstream in(dir / "adapter_config.json");
  const json cfg = json::parse(in);
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8);
  EXPECT_EQ(cfg["rank_pattern"].size(), 1u);
  EXPECT_EQ(cfg["alpha_pattern"].size(), 1u);
  EXPECT_EQ(cfg["base_model_name_or_path"], "meta-llama/Llama-3.1-8B");
  // Layer 2's q_proj has no adapter: the targets are the exact paths, not "q_proj".
  ASSERT_TRUE(cfg["target_modules"].is_string());
  EXPECT_NE(cfg["target_modules"].get<std::string>().find("model\\.layers\\.1\\.self_attn\\.q_proj"),
            std::string::npos);
  const auto tensors = io::loadSafetensors(dir / "adapter_model.safetensors");
  EXPECT_EQ(tensors.size(), 6u);
  EXPECT_TRUE(tensors.count("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight"));

  const auto back = readPeftAdapter(dir.path());
  ASSERT_EQ(back.size(), mods.size());
  for (const auto& b : back) {
    const auto it = std::find_if(mods.begin(), mods.end(), [&](const auto& m) { return m.modulePath == b.modulePath; });
    ASSERT_NE(it, mods.end()) << b.modulePath;
    EXPECT_TRUE(at::equal(b.down, it->down)) << b.modulePath;
    EXPECT_TRUE(at::equal(b.up, it->up)) << b.modulePath;
    EXPECT_DOUBLE_EQ(b.alpha, it->alpha) << b.modulePath;
  }
}

// Issue 32: a rank read from adapter_config.json is bounded (1e300 was cast to an
// integer for the message, undefined behaviour; NaN passed "must be positive").
TEST(LlamaPeft, AbsurdRankIsRefusedNamingTheKey) {
  test::TempDir dir;
  json cfg = peftConfig();
  cfg["r"] = 1e300;
  writeFolder(dir.path(), cfg);
  std::string msg = errorOf<ConfigError>(dir.path());
  EXPECT_NE(msg.find("adapter_config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key 'r'"), std::string::npos) << msg;
  cfg = peftConfig();
  cfg["rank_pattern"] = {{"v_proj", 1e300}};
  writeFolder(dir.path(), cfg);
  msg = errorOf<ConfigError>(dir.path());
  EXPECT_NE(msg.find("key 'rank_pattern'"), std::string::npos) << msg;
}
