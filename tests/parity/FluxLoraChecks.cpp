// Parity of the LoRA network with the reference fixtures of kind "flux_transformer"
// (diffusers + peft, float32, CPU): forward with the LoRA file, the loss, the
// LoRA gradients and one AdamW step. Config, rank, alpha and tolerance come from
// each folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <set>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "parity/FluxFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

using parity::adamwOptionsOf;
using parity::inputsOf;
using parity::Tolerance;
using parity::toleranceOf;

// The base model of the folder with the folder's LoRA file applied at alpha/r.
struct LoraFixture {
  flux::FluxConfig cfg;
  std::unique_ptr<flux::FluxTransformer> model;
  std::shared_ptr<lora::LoraNetwork> net;
  std::map<std::string, at::Tensor> inputs;
  std::map<std::string, at::Tensor> outputs;
  Tolerance tol;

  LoraFixture(const fs::path& dir, const nlohmann::json& manifest) {
    cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
    tol = toleranceOf(manifest);
    model = std::make_unique<flux::FluxTransformer>(cfg);
    flux::loadFluxWeights(*model, dir / "transformer.safetensors");
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    lora::LoraLoadOptions options;
    options.alpha = manifest.at("lora").at("alpha").get<double>();
    net = lora::loadLoraNetwork(*model, flux::FluxLoraRules(cfg), dir / "lora.safetensors", options);
    net->train(true);  // the reference has no dropout; training mode must not change anything
    inputs = io::loadSafetensors(dir / "inputs.safetensors");
    outputs = io::loadSafetensors(dir / "outputs.safetensors");
  }

  at::Tensor forward() { return model->forward(inputsOf(inputs)); }
  at::Tensor loss(const at::Tensor& out) { return (out - inputs.at("target")).pow(2).mean(); }
};

void checkLoraTargets(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  const auto& l = manifest.at("lora");
  const int64_t rank = l.at("rank").get<int64_t>();
  std::set<std::string> fromFile;
  for (const auto& a : f.net->adapters()) {
    fromFile.insert(a->hostPath());
    EXPECT_EQ(a->rank(), rank) << a->hostPath();
    EXPECT_DOUBLE_EQ(a->scale(), l.at("alpha").get<double>() / static_cast<double>(rank)) << a->hostPath();
  }
  EXPECT_TRUE(fromFile.count("proj_out")) << "the file's top-level proj_out LoRA must be applied";
  // The manifest's target_modules, matched with peft's rule, pick the same modules.
  flux::FluxTransformer fresh(f.cfg);
  lora::LoraConfig c;
  c.rank = rank;
  c.alpha = l.at("alpha").get<double>();
  c.targetModules = l.at("target_modules").get<std::vector<std::string>>();
  const auto created = lora::LoraNetwork::create(fresh, c);
  std::set<std::string> fromTargets;
  for (const auto& a : created->adapters()) fromTargets.insert(a->hostPath());
  EXPECT_EQ(fromTargets, fromFile);
}

void checkLoraForwardAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  at::NoGradGuard noGrad;
  const auto out = f.forward();
  EXPECT_TRUE(test::allClose(out, f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol)) << "output_lora";
  const auto& refLoss = f.outputs.at("loss");
  EXPECT_TRUE(test::allClose(f.loss(out).reshape(refLoss.sizes()), refLoss, f.tol.atol, f.tol.rtol)) << "loss";
  // The same file merged into the base weights gives the same output.
  f.net->merge();
  EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol)) << "merged";
  f.net->unmerge();
  f.net->detach();
  EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output"), f.tol.atol, f.tol.rtol)) << "detached = base";
}

void checkLoraGradsAndAdamW(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  f.loss(f.forward()).backward();
  const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
  const auto after = io::loadSafetensors(dir / "lora_after_adamw.safetensors");
  const auto sd = f.net->stateDict("transformer.");
  std::set<std::string> ours, theirs;
  for (const auto& [k, v] : sd) ours.insert(k);
  for (const auto& [k, v] : grads) theirs.insert(k);
  EXPECT_EQ(ours, theirs) << "LoRA state dict keys differ from lora_grads.safetensors";
  for (const auto& [key, param] : sd) {
    if (!grads.count(key)) continue;
    ASSERT_TRUE(param.grad().defined()) << key;
    EXPECT_TRUE(test::allClose(param.grad(), grads.at(key), f.tol.atol, f.tol.rtol)) << "grad " << key;
  }
  torch::optim::AdamW optimizer(f.net->parameters(), adamwOptionsOf(manifest));
  optimizer.step();
  for (const auto& [key, param] : sd) {
    if (!after.count(key)) continue;
    EXPECT_TRUE(test::allClose(param, after.at(key), f.tol.atol, f.tol.rtol)) << "after AdamW " << key;
  }
}

// The folder's LoRA through the kohya and ComfyUI forms (fused q/k/v and
// linear1, swapped final modulation) and back gives the same output.
void checkLoraFormsRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  const auto weights = f.net->moduleWeights();
  f.net.reset();
  for (const auto format :
       {lora::LoraFileFormat::Diffusers, lora::LoraFileFormat::Kohya, lora::LoraFileFormat::Comfy}) {
    const auto exported = lora::loraTensorsForExport(weights, format, flux::FluxLoraRules(f.cfg));
    const std::map<std::string, at::Tensor> tensors(exported.begin(), exported.end());
    auto net = lora::LoraNetwork::fromWeights(
        *f.model, lora::convertLoraTensors(tensors, {}, flux::FluxLoraRules(f.cfg)).modules);
    at::NoGradGuard noGrad;
    EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol))
        << "through " << lora::toString(format);
  }
}

}  // namespace

STRATA_PARITY_CHECK("flux_transformer", "LoRA through diffusers, kohya and ComfyUI forms and back",
                    checkLoraFormsRoundTrip);
STRATA_PARITY_CHECK("flux_transformer", "LoRA file targets = manifest target_modules (peft rule)", checkLoraTargets);
STRATA_PARITY_CHECK("flux_transformer", "forward with LoRA (alpha/r), loss, merge, detach", checkLoraForwardAndLoss);
STRATA_PARITY_CHECK("flux_transformer", "LoRA gradients and one AdamW step", checkLoraGradsAndAdamW);
