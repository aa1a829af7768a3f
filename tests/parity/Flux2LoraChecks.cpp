// Parity of the LoRA network on FLUX.2 with the reference fixtures of kind
// "flux2_transformer" (diffusers + peft, float32, CPU): which modules the file
// names (the shared modulation Linears and norm_out.linear among them), forward
// with the file applied, the loss, the LoRA gradients and one AdamW step. Config,
// rank, alpha and tolerance come from each folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
#include "parity/LoraParityChecks.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

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
  const auto fromFile = parity::expectFileAdaptersAtRankAndAlpha(f, manifest);
  const auto& l = manifest.at("lora");
  if (l.contains("modules")) {
    const auto listed = l.at("modules").get<std::vector<std::string>>();
    EXPECT_EQ(fromFile, std::set<std::string>(listed.begin(), listed.end())) << "modules the file's LoRA sits on";
  }
  if (l.contains("target_patterns")) {
    // peft's regex targets (full match) pick the same Linears of a fresh model.
    flux2::Flux2Transformer fresh(f.cfg);
    const flux2::Flux2LoraRules rules(f.cfg);
    std::vector<std::string> targets;
    for (const auto& p : l.at("target_patterns")) targets.push_back("re:" + p.get<std::string>());
    EXPECT_EQ(parity::adapterPathsOfTargets(fresh, &rules, manifest, targets), fromFile)
        << "manifest target_patterns vs the file";
  }
}

void checkLoraForwardAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  parity::expectLoraForwardLossMergeDetach(f);
}

void checkLoraGradsAndAdamW(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  parity::expectLoraGradsAndAdamW(f, dir, manifest);
}

// The folder's LoRA through the kohya and ComfyUI forms (BFL names: fused q/k/v,
// swapped final modulation) and back gives the same output.
void checkLoraFormsRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2LoraFixture f(dir, manifest);
  parity::expectLoraFormsRoundTrip(f, flux2::Flux2LoraRules(f.cfg));
}

}  // namespace

STRATA_PARITY_CHECK("flux2_transformer", "LoRA file modules = manifest modules and target_patterns", checkLoraTargets);
STRATA_PARITY_CHECK("flux2_transformer", "forward with LoRA (alpha/r), loss, merge, detach", checkLoraForwardAndLoss);
STRATA_PARITY_CHECK("flux2_transformer", "LoRA gradients and one AdamW step", checkLoraGradsAndAdamW);
STRATA_PARITY_CHECK("flux2_transformer", "LoRA through diffusers, kohya and ComfyUI forms and back",
                    checkLoraFormsRoundTrip);
