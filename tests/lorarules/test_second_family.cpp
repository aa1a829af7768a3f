// A second model family that core/lora knows nothing about: a tiny causal LM in
// peft form only (no fused modules, peft's "base_model.model." stems), given to
// core/lora through nn::LoraNameRules alone. This executable links strata_lora
// and no model family, so it also proves core/lora needs none.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "nn/Linear.h"
#include "nn/LoraNameRules.h"

using namespace strata;
using namespace strata::lora;

namespace {

constexpr int64_t kWidth = 8;
constexpr int64_t kMlp = 12;
constexpr int64_t kLayers = 2;

// model.layers.N.self_attn.{q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj, lm_head.
class TinyLm : public torch::nn::Module {
 public:
  TinyLm() {
    auto model = register_module("model", std::make_shared<torch::nn::Module>());
    auto layers = model->register_module("layers", std::make_shared<torch::nn::Module>());
    for (int64_t i = 0; i < kLayers; ++i) {
      auto layer = layers->register_module(std::to_string(i), std::make_shared<torch::nn::Module>());
      auto attn = layer->register_module("self_attn", std::make_shared<torch::nn::Module>());
      for (const char* n : {"q_proj", "k_proj", "v_proj", "o_proj"})
        attn->register_module(n, nn::Linear(kWidth, kWidth, false));
      auto mlp = layer->register_module("mlp", std::make_shared<torch::nn::Module>());
      mlp->register_module("gate_proj", nn::Linear(kWidth, kMlp, false));
      mlp->register_module("up_proj", nn::Linear(kWidth, kMlp, false));
      mlp->register_module("down_proj", nn::Linear(kMlp, kWidth, false));
    }
    register_module("lm_head", nn::Linear(kWidth, 16, false));
  }
  std::shared_ptr<nn::LinearImpl> linear(const std::string& path) {
    return std::dynamic_pointer_cast<nn::LinearImpl>(named_modules("", /*include_self=*/false)[path]);
  }
};

// The whole family's LoRA naming: peft keys only.
class TinyLmRules final : public nn::LoraNameRules {
 public:
  std::string familyName() const override { return "TinyLM"; }
  std::vector<std::string> defaultTargets() const override { return {"q_proj", "v_proj"}; }
  std::vector<nn::LoraLinear> linears() const override {
    std::vector<nn::LoraLinear> out;
    for (int64_t i = 0; i < kLayers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
        out.push_back({p + n, kWidth, kWidth});
      out.push_back({p + "mlp.gate_proj", kWidth, kMlp});
      out.push_back({p + "mlp.up_proj", kWidth, kMlp});
      out.push_back({p + "mlp.down_proj", kMlp, kWidth});
    }
    out.push_back({"lm_head", kWidth, 16});
    return out;
  }
  std::vector<nn::LoraFileFormat> formats() const override { return {nn::LoraFileFormat::Diffusers}; }
  std::optional<nn::LoraSlot> slotOf(const std::string& path, nn::LoraFileFormat format) const override {
    if (format != nn::LoraFileFormat::Diffusers) return std::nullopt;
    for (const auto& l : linears())
      if (l.path == path) return slot(kPrefix + path, l.outFeatures);
    return std::nullopt;
  }
  std::optional<nn::LoraStemMatch> matchStem(const std::string& stem) const override {
    if (stem.rfind(kPrefix, 0) != 0) return std::nullopt;
    nn::LoraStemMatch m;
    const std::string path = stem.substr(std::string(kPrefix).size());
    for (const auto& l : linears())
      if (l.path == path) m.modules.emplace_back(path, slot(stem, l.outFeatures));
    return m;
  }
  std::map<std::string, std::string> exportMetadata() const override {
    return {{"modelspec.architecture", "tiny-lm/lora"}};
  }

 private:
  static constexpr const char* kPrefix = "base_model.model.";
  static nn::LoraSlot slot(std::string stem, int64_t rows) {
    nn::LoraSlot s;
    s.stem = std::move(stem);
    s.rows = s.totalRows = rows;
    return s;
  }
};

LoraConfig defaults(int64_t rank, double alpha) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  return c;
}

void randomizeUps(LoraNetwork& net) {
  at::NoGradGuard noGrad;
  for (const auto& a : net.adapters()) a->up.copy_(at::randn(a->up.sizes()) * 0.1);
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SecondFamily, DefaultTargetsComeFromTheFamily) {
  TinyLm model;
  const TinyLmRules rules;
  auto net = LoraNetwork::create(model, defaults(2, 4), rules);
  ASSERT_EQ(net->adapters().size(), static_cast<size_t>(2 * kLayers));
  for (const auto& a : net->adapters()) {
    const auto& p = a->hostPath();
    EXPECT_TRUE(p.size() > 6 && (p.substr(p.size() - 6) == "q_proj" || p.substr(p.size() - 6) == "v_proj")) << p;
  }
  TinyLm other;
  EXPECT_THROW(LoraNetwork::create(other, defaults(2, 4)), ConfigError) << "no family: targets must be given";
}

TEST(SecondFamily, PeftFileRoundTripsWithItsOwnNames) {
  TinyLm model;
  const TinyLmRules rules;
  strata::test::TempDir dir;
  const auto path = dir / "lm.safetensors";
  std::vector<LoraModuleWeights> before;
  at::Tensor withLora;
  const at::Tensor x = at::randn({3, kWidth});
  {
    LoraConfig c = defaults(2, 6);  // scale 3
    c.targetModules = {"*.self_attn.*", "down_proj"};
    auto net = LoraNetwork::create(model, c, rules);
    randomizeUps(*net);
    before = net->moduleWeights();
    withLora = model.linear("model.layers.1.self_attn.o_proj")->forward(x);
    writeLoraFile(path, *net, rules, LoraExportOptions{});
  }
  const auto file = io::SafetensorsFile::open(path);
  const auto names = file.names();
  EXPECT_EQ(names.size(), 2 * before.size()) << "no .alpha tensors in the peft form";
  EXPECT_TRUE(file.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(file.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
  const auto& meta = file.metadata();
  EXPECT_EQ(meta.at("modelspec.architecture"), "tiny-lm/lora");
  EXPECT_EQ(meta.count("ss_base_model_version"), 0u) << "no other family's keys";
  const auto peft = nlohmann::json::parse(meta.at("lora_adapter_metadata"));
  EXPECT_EQ(peft.at("r"), 2) << "plain peft keys, no component prefix";
  EXPECT_EQ(peft.at("lora_alpha"), 2);

  const auto content = readLoraFile(path, rules);
  EXPECT_EQ(content.format, LoraFileFormat::Diffusers);
  ASSERT_EQ(content.modules.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(content.modules[i].modulePath, before[i].modulePath) << "model order";
    const auto delta = [](const LoraModuleWeights& w) { return at::matmul(w.up, w.down) * (w.alpha / w.down.size(0)); };
    EXPECT_TRUE(strata::test::allClose(delta(content.modules[i]), delta(before[i]), 1e-6, 1e-5))
        << before[i].modulePath;
  }
  auto loaded = loadLoraNetwork(model, rules, path);
  EXPECT_TRUE(
      strata::test::allClose(model.linear("model.layers.1.self_attn.o_proj")->forward(x), withLora, 1e-6, 1e-5));
}

TEST(SecondFamily, FormsTheFamilyLacksAreRefusedClearly) {
  TinyLm model;
  const TinyLmRules rules;
  auto net = LoraNetwork::create(model, defaults(2, 2), rules);
  const std::string kohya = errorOf([&] { loraTensorsForExport(net->moduleWeights(), LoraFileFormat::Kohya, rules); });
  EXPECT_NE(kohya.find("TinyLM LoRAs have no kohya form"), std::string::npos) << kohya;
  EXPECT_NE(kohya.find("diffusers"), std::string::npos) << kohya;

  const auto down = at::randn({2, kWidth}), up = at::randn({kWidth, 2});
  const std::string foreign = errorOf([&] {
    convertLoraTensors({{"lora_unet_layers_0_q.lora_down.weight", down}, {"lora_unet_layers_0_q.lora_up.weight", up}},
                       {}, rules);
  });
  EXPECT_NE(foreign.find("lora_unet_layers_0_q.lora_up.weight"), std::string::npos) << foreign;
  EXPECT_NE(foreign.find("none of the TinyLM LoRA forms"), std::string::npos) << foreign;

  const std::string unknown = errorOf([&] {
    convertLoraTensors({{"base_model.model.model.layers.5.self_attn.q_proj.lora_A.weight", down},
                        {"base_model.model.model.layers.5.self_attn.q_proj.lora_B.weight", up}},
                       {}, rules);
  });
  EXPECT_NE(unknown.find("model.layers.5.self_attn.q_proj"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("TinyLM"), std::string::npos) << unknown;
}

TEST(SecondFamily, PeftAlphaFromUnprefixedMetadata) {
  const TinyLmRules rules;
  const std::map<std::string, at::Tensor> t{{"base_model.model.lm_head.lora_A.weight", at::randn({4, kWidth})},
                                            {"base_model.model.lm_head.lora_B.weight", at::randn({16, 4})}};
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, {}, rules).modules[0].alpha, 4.0);
  const std::map<std::string, std::string> meta{{"lora_adapter_metadata", R"({"r": 4, "lora_alpha": 8})"}};
  EXPECT_DOUBLE_EQ(convertLoraTensors(t, meta, rules).modules[0].alpha, 8.0);
}

TEST(SecondFamily, RunStateDictRoundTripsWithoutAModel) {
  TinyLm model;
  const TinyLmRules rules;
  auto net = LoraNetwork::create(model, defaults(2, 4), rules);
  randomizeUps(*net);
  std::map<std::string, at::Tensor> sd;
  for (const auto& [k, v] : net->stateDict("run.")) sd[k] = v.detach().clone();
  const auto modules = moduleWeightsFromStateDict(sd, "run.", 4.0, "checkpoint");
  ASSERT_EQ(modules.size(), net->adapters().size());
  for (const auto& m : modules) {
    const auto a = net->adapter(m.modulePath);
    ASSERT_NE(a, nullptr) << m.modulePath;
    EXPECT_TRUE(m.down.equal(a->down));
    EXPECT_TRUE(m.up.equal(a->up));
    EXPECT_DOUBLE_EQ(m.alpha, 4.0);
  }
  auto bad = sd;
  bad["run.model.layers.0.self_attn.q_proj.weight"] = at::zeros({1});
  const std::string notLora = errorOf([&] { moduleWeightsFromStateDict(bad, "run.", 4.0, "checkpoint"); });
  EXPECT_NE(notLora.find("run.model.layers.0.self_attn.q_proj.weight"), std::string::npos) << notLora;
  bad = sd;
  bad.erase("run.model.layers.0.self_attn.q_proj.lora_B.weight");
  const std::string half = errorOf([&] { moduleWeightsFromStateDict(bad, "run.", 4.0, "checkpoint"); });
  EXPECT_NE(half.find("model.layers.0.self_attn.q_proj"), std::string::npos) << half;
  EXPECT_NE(half.find("checkpoint"), std::string::npos) << half;
}
