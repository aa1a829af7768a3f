// Parity of the LoRA network with the reference fixtures of kind "flux_transformer"
// (diffusers + peft, float32, CPU): forward with the LoRA file, the loss, the
// LoRA gradients and one AdamW step. Config, rank, alpha and tolerance come from
// each folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "parity/FluxFixture.h"
#include "parity/LoraParityChecks.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

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

// The module paths the peft file names ("transformer.<path>.lora_A.weight" and
// ".lora_B.weight"); any other key fails, naming it.
std::set<std::string> modulePathsOfPeftFile(const fs::path& file) {
  const std::string prefix = "transformer.";
  std::map<std::string, int> halves;  // path -> number of lora_A / lora_B keys
  for (const auto& [key, t] : io::loadSafetensors(file)) {
    std::string path;
    for (const std::string suffix : {".lora_A.weight", ".lora_B.weight"})
      if (key.size() > prefix.size() + suffix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
          key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
        path = key.substr(prefix.size(), key.size() - prefix.size() - suffix.size());
    EXPECT_FALSE(path.empty()) << file << ": " << key << " is not a peft LoRA key";
    if (!path.empty()) ++halves[path];
  }
  std::set<std::string> paths;
  for (const auto& [path, n] : halves) {
    EXPECT_EQ(n, 2) << file << ": " << path << " needs lora_A and lora_B";
    paths.insert(path);
  }
  return paths;
}

// Every adapter of the file is a module the manifest's target_modules pick by peft's
// rule and every such module has one: the file's keys, the loaded network and the
// targets name the same modules.
void checkLoraTargets(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  const auto loaded = parity::expectFileAdaptersAtRankAndAlpha(f, manifest);
  const auto inFile = modulePathsOfPeftFile(dir / "lora.safetensors");
  EXPECT_EQ(loaded, inFile) << "the loaded adapters are the file's";
  flux::FluxTransformer fresh(f.cfg);
  EXPECT_EQ(parity::adapterPathsOfTargets(fresh, nullptr, manifest,
                                          manifest.at("lora").at("target_modules").get<std::vector<std::string>>()),
            inFile);
}

void checkLoraForwardAndLoss(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  parity::expectLoraForwardLossMergeDetach(f);
}

void checkLoraGradsAndAdamW(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  parity::expectLoraGradsAndAdamW(f, dir, manifest);
}

// The folder's LoRA through the kohya and ComfyUI forms (fused q/k/v and
// linear1, swapped final modulation) and back gives the same output.
void checkLoraFormsRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  LoraFixture f(dir, manifest);
  parity::expectLoraFormsRoundTrip(f, flux::FluxLoraRules(f.cfg));
}

}  // namespace

STRATA_PARITY_CHECK("flux_transformer", "LoRA through diffusers, kohya and ComfyUI forms and back",
                    checkLoraFormsRoundTrip);
STRATA_PARITY_CHECK("flux_transformer", "LoRA file targets = manifest target_modules (peft rule)", checkLoraTargets);
STRATA_PARITY_CHECK("flux_transformer", "forward with LoRA (alpha/r), loss, merge, detach", checkLoraForwardAndLoss);
STRATA_PARITY_CHECK("flux_transformer", "LoRA gradients and one AdamW step", checkLoraGradsAndAdamW);
