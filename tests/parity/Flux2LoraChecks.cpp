// Parity of the LoRA network on FLUX.2 with the reference fixtures of kind
// "flux2_transformer" (diffusers + peft, float32, CPU): which modules the file
// names (the shared modulation Linears and norm_out.linear among them), forward
// with the file applied, the loss, the LoRA gradients and one AdamW step. Config,
// rank, alpha and tolerance come from each folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <set>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Transformer.h"
#include "parity/FluxFixture.h"
#include "parity/Flux2Fixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

using parity::adamwOptionsOf;
using parity::flux2ConfigOf;
using parity::flux2InputsOf;
using parity::Tolerance;
using parity::toleranceOf;

// The folder's base model, frozen, with its LoRA file applied at the manifest's alpha.
struct Flux2LoraFixture {
  flux2::Flux2Config cfg;
  std::unique_ptr<flux2::Flux2Transformer> model;
  std::shared_ptr<lora::LoraNetwork> net;
  std::map<std::string, at::Tensor> inputs;
  std::map<std::string, at::Tensor> outputs;
  Tolerance tol;

  Flux2LoraFixture(const fs::path& dir, const nlohmann::json& manifest) {
    cfg = flux2ConfigOf(manifest);
    tol = toleranceOf(manifest);
    model = std::make_unique<flux2::Flux2Transformer>(cfg);
    flux2::loadFlux2Weights(*model, dir / "transformer.safetensors");
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    lora::LoraLoadOptions options;
    options.alpha = manifest.at("lora").at("alpha").get<double>();
    net = lora::loadLoraNetwork(*model, flux2::Flux2LoraRules(cfg), dir / "lora.safetensors", options);
    net->train(true);  // the reference has no dropout; training mode must change nothing
    inputs = io::loadSafetensors(dir / "inputs.safetensors");
    outputs = io::loadSafetensors(dir / "outputs.safetensors");
  }

  at::Tensor forward() { return model->forward(flux2InputsOf(inputs)); }
  at::Tensor loss(const at::Tensor& out) { return (out - inputs.at("target")).pow(2).mean(); }
};

void checkLoraTargets(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  const auto& l = manifest.at("lora");
  const int64_t rank = l.at("rank").get<int64_t>();
  const double alpha = l.at("alpha").get<double>();
  std::set<std::string> fromFile;
  for (const auto& a : f.net->adapters()) {
    fromFile.insert(a->hostPath());
    EXPECT_EQ(a->rank(), rank) << a->hostPath();
    EXPECT_DOUBLE_EQ(a->scale(), alpha / static_cast<double>(rank)) << a->hostPath();
  }
  if (l.contains("modules")) {
    const auto listed = l.at("modules").get<std::vector<std::string>>();
    EXPECT_EQ(fromFile, std::set<std::string>(listed.begin(), listed.end())) << "modules the file's LoRA sits on";
  }
  if (l.contains("target_patterns")) {
    // peft's regex targets (full match) pick the same Linears of a fresh model.
    flux2::Flux2Transformer fresh(f.cfg);
    lora::LoraConfig c;
    c.rank = rank;
    c.alpha = alpha;
    for (const auto& p : l.at("target_patterns")) c.targetModules.push_back("re:" + p.get<std::string>());
    const auto created = lora::LoraNetwork::create(fresh, c, flux2::Flux2LoraRules(f.cfg));
    std::set<std::string> fromTargets;
    for (const auto& a : created->adapters()) fromTargets.insert(a->hostPath());
    EXPECT_EQ(fromTargets, fromFile) << "manifest target_patterns vs the file";
  }
}

void checkLoraForwardAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  at::NoGradGuard noGrad;
  const auto out = f.forward();
  EXPECT_TRUE(test::allClose(out, f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol)) << "output_lora";
  const auto& refLoss = f.outputs.at("loss");
  EXPECT_TRUE(test::allClose(f.loss(out).reshape(refLoss.sizes()), refLoss, f.tol.atol, f.tol.rtol)) << "loss";
  f.net->merge();  // folded into the base weights: the same output
  EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol)) << "merged";
  f.net->unmerge();
  f.net->detach();
  EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output"), f.tol.atol, f.tol.rtol)) << "detached = base";
}

void checkLoraGradsAndAdamW(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
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

// The folder's LoRA through the kohya and ComfyUI forms (BFL names: fused q/k/v,
// swapped final modulation) and back gives the same output.
void checkLoraFormsRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  const auto weights = f.net->moduleWeights();
  f.net.reset();
  const flux2::Flux2LoraRules rules(f.cfg);
  for (const auto format :
       {lora::LoraFileFormat::Diffusers, lora::LoraFileFormat::Kohya, lora::LoraFileFormat::Comfy}) {
    const auto exported = lora::loraTensorsForExport(weights, format, rules);
    const std::map<std::string, at::Tensor> tensors(exported.begin(), exported.end());
    auto net = lora::LoraNetwork::fromWeights(*f.model, lora::convertLoraTensors(tensors, {}, rules).modules);
    at::NoGradGuard noGrad;
    EXPECT_TRUE(test::allClose(f.forward(), f.outputs.at("output_lora"), f.tol.atol, f.tol.rtol))
        << "through " << lora::toString(format);
  }
}

}  // namespace

STRATA_PARITY_CHECK("flux2_transformer", "LoRA file modules = manifest modules and target_patterns", checkLoraTargets);
STRATA_PARITY_CHECK("flux2_transformer", "forward with LoRA (alpha/r), loss, merge, detach", checkLoraForwardAndLoss);
STRATA_PARITY_CHECK("flux2_transformer", "LoRA gradients and one AdamW step", checkLoraGradsAndAdamW);
STRATA_PARITY_CHECK("flux2_transformer", "LoRA through diffusers, kohya and ComfyUI forms and back",
                    checkLoraFormsRoundTrip);
