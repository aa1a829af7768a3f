// Parity of the Llama-family causal LM with the reference fixtures of kind
// "causal_lm" (transformers LlamaForCausalLM + peft, float32, CPU): config and
// rotary frequencies, logits where the attention mask is 1, the shifted
// response-only loss, the peft adapter's forward and loss, its gradients, one
// AdamW step, and the adapter written back in peft's form.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "common/TestSupport.h"
#include "lora/LoraTargets.h"
#include "models/llama/LlamaConfig.h"
#include "parity/CausalLmFixture.h"
#include "parity/LoraParityChecks.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;
using parity::CausalLmFixture;

namespace {

void checkConfigAndRope(const fs::path& dir, const nlohmann::json& manifest) {
  const auto fromFolder = llama::LlamaConfig::fromFile(dir / "model");
  const auto fromManifest = llama::LlamaConfig::fromJson(manifest.at("config"), "manifest.json config");
  EXPECT_EQ(fromFolder.toJson(), fromManifest.toJson());
  CausalLmFixture f(dir, manifest);
  EXPECT_TRUE(test::allClose(f.model->invFreq(), f.outputs.at("rope_inv_freq"), 0.0, 1e-6)) << "rope_inv_freq";
  // The model is called without position ids: the reference's are 0..L-1 per row.
  const auto& pos = f.inputs.at("position_ids");
  EXPECT_TRUE(at::equal(pos, at::arange(pos.size(1), pos.options()).expand_as(pos)));
  // named_parameters() is the checkpoint's key set (the strict load also proves it).
  const auto weights = llama::openLlamaWeights(dir / "model");
  std::set<std::string> ours, theirs;
  for (const auto& p : f.model->named_parameters()) ours.insert(p.key());
  for (const auto& [n, shape] : weights.shapes()) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
}

void checkBaseLogitsAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  CausalLmFixture f(dir, manifest);
  at::NoGradGuard noGrad;
  const auto logits = f.forward();
  ASSERT_EQ(logits.sizes(), f.outputs.at("logits").sizes());
  EXPECT_TRUE(test::allClose(f.where(logits), f.where(f.outputs.at("logits")), f.tol.atol, f.tol.rtol))
      << "logits where attention_mask = 1";
  const auto& refLoss = f.outputs.at("loss");
  EXPECT_TRUE(test::allClose(f.loss(logits).reshape(refLoss.sizes()), refLoss, f.tol.atol, f.tol.rtol)) << "loss";
}

void checkLoraTargetsForwardAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  CausalLmFixture f(dir, manifest);
  f.withAdapter(dir);
  const auto& l = manifest.at("lora");
  // The adapters are the manifest's modules, and its target_modules pick the same ones by peft's rule.
  std::set<std::string> fromFile, listed, fromTargets;
  for (const auto& a : f.net->adapters()) {
    fromFile.insert("base_model.model." + a->hostPath());
    if (l.contains("rank")) EXPECT_EQ(a->rank(), l["rank"].get<int64_t>()) << a->hostPath();
    if (l.contains("scale")) EXPECT_DOUBLE_EQ(a->scale(), l["scale"].get<double>()) << a->hostPath();
  }
  for (const auto& m : l.at("modules")) listed.insert(m.get<std::string>());
  EXPECT_EQ(fromFile, listed);
  // peft's target_modules: a list of names (suffix rule) or one regex over the whole path.
  const auto& tm = l.at("target_modules");
  const lora::LoraTargets targets(tm.is_string() ? std::vector<std::string>{"re:" + tm.get<std::string>()}
                                                 : tm.get<std::vector<std::string>>());
  for (const auto& [path, _] : f.model->linears())
    if (targets.matches(path)) fromTargets.insert("base_model.model." + path);
  EXPECT_EQ(fromTargets, listed);

  at::NoGradGuard noGrad;
  const auto logits = f.forward();
  EXPECT_TRUE(test::allClose(f.where(logits), f.where(f.outputs.at("logits_lora")), f.tol.atol, f.tol.rtol))
      << "logits_lora where attention_mask = 1";
  const auto& refLoss = f.outputs.at("loss_lora");
  EXPECT_TRUE(test::allClose(f.loss(logits).reshape(refLoss.sizes()), refLoss, f.tol.atol, f.tol.rtol)) << "loss_lora";
  f.net->merge();
  EXPECT_TRUE(test::allClose(f.where(f.forward()), f.where(f.outputs.at("logits_lora")), f.tol.atol, f.tol.rtol))
      << "merged";
  f.net->unmerge();
  f.net->detach();
  EXPECT_TRUE(test::allClose(f.where(f.forward()), f.where(f.outputs.at("logits")), f.tol.atol, f.tol.rtol))
      << "detached = base";
}

void checkLoraGradsAndAdamW(const fs::path& dir, const nlohmann::json& manifest) {
  CausalLmFixture f(dir, manifest);
  f.withAdapter(dir);
  parity::expectLoraGradsAndAdamW(f, dir, manifest, "base_model.model.");
}

// Written back in peft's form and read again: the same keys, tensors and scale.
void checkPeftRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  CausalLmFixture f(dir, manifest);
  f.withAdapter(dir);
  test::TempDir tmp;
  std::vector<std::string> linearPaths;
  for (const auto& [path, _] : f.model->linears()) linearPaths.push_back(path);
  lora::PeftWriteOptions options;
  options.modelLinearPaths = linearPaths;
  lora::writePeftAdapter(tmp.path(), f.net->moduleWeights(), options);
  const auto original = io::loadSafetensors(dir / "adapter" / "adapter_model.safetensors");
  const auto written = io::loadSafetensors(tmp / "adapter_model.safetensors");
  ASSERT_EQ(original.size(), written.size());
  for (const auto& [key, t] : original) {
    ASSERT_TRUE(written.count(key)) << key;
    EXPECT_TRUE(at::equal(written.at(key), t)) << key;
  }
  f.net.reset();
  auto back = lora::loadPeftAdapter(*f.model, tmp.path());
  at::NoGradGuard noGrad;
  EXPECT_TRUE(test::allClose(f.where(f.forward()), f.where(f.outputs.at("logits_lora")), f.tol.atol, f.tol.rtol))
      << "after the round trip";
}

}  // namespace

STRATA_PARITY_CHECK("causal_lm", "config.json = manifest config, rotary frequencies, key set", checkConfigAndRope);
STRATA_PARITY_CHECK("causal_lm", "base logits where attention_mask = 1, shifted loss", checkBaseLogitsAndLoss);
STRATA_PARITY_CHECK("causal_lm", "peft adapter: targets, logits and loss, merge, detach",
                    checkLoraTargetsForwardAndLoss);
STRATA_PARITY_CHECK("causal_lm", "LoRA gradients and one AdamW step", checkLoraGradsAndAdamW);
STRATA_PARITY_CHECK("causal_lm", "peft adapter written and read back", checkPeftRoundTrip);
