#pragma once
// The LoRA parity checks FLUX.1 and FLUX.2 share (tests/parity/Flux*LoraChecks.cpp; the
// causal LM's uses the gradient check). Each takes the family's fixture F: the folder's
// frozen base with its LoRA file applied, with F::net (lora::LoraNetwork), F::outputs (the
// folder's outputs), F::tol, F::forward() (the model on the folder's inputs) and
// F::loss(out) (the reference's loss). What differs by family (building the fixture,
// which targets the manifest names) stays in the family's file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "parity/FluxFixture.h"

namespace strata::parity {

// Every adapter of the file at the manifest's rank and scale alpha / rank; their host paths.
template <class F>
std::set<std::string> expectFileAdaptersAtRankAndAlpha(const F& f, const nlohmann::json& manifest) {
  const auto& l = manifest.at("lora");
  const int64_t rank = l.at("rank").get<int64_t>();
  const double alpha = l.at("alpha").get<double>();
  std::set<std::string> fromFile;
  for (const auto& a : f.net->adapters()) {
    fromFile.insert(a->hostPath());
    EXPECT_EQ(a->rank(), rank) << a->hostPath();
    EXPECT_DOUBLE_EQ(a->scale(), alpha / static_cast<double>(rank)) << a->hostPath();
  }
  return fromFile;
}

// The host paths of the adapters `targets` creates on `fresh` at the manifest's rank and
// alpha, named by `rules` (null: LoraNetwork::create's own).
inline std::set<std::string> adapterPathsOfTargets(torch::nn::Module& fresh, const nn::LoraNameRules* rules,
                                                   const nlohmann::json& manifest, std::vector<std::string> targets) {
  lora::LoraConfig c;
  c.rank = manifest.at("lora").at("rank").get<int64_t>();
  c.alpha = manifest.at("lora").at("alpha").get<double>();
  c.targetModules = std::move(targets);
  const auto created = rules ? lora::LoraNetwork::create(fresh, c, *rules) : lora::LoraNetwork::create(fresh, c);
  std::set<std::string> paths;
  for (const auto& a : created->adapters()) paths.insert(a->hostPath());
  return paths;
}

// Forward with the file (output_lora), its loss, the same merged into the base weights,
// and the base output once the network is detached.
template <class F>
void expectLoraForwardLossMergeDetach(F& f) {
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

// The loss gradients of every LoRA tensor (lora_grads.safetensors, the same key set) and
// the tensors after one AdamW step at the reference's settings (lora_after_adamw.safetensors),
// the reference's keys under `keyPrefix` (peft's "transformer." for a diffusers model).
template <class F>
void expectLoraGradsAndAdamW(F& f, const std::filesystem::path& dir, const nlohmann::json& manifest,
                             const std::string& keyPrefix = "transformer.") {
  f.loss(f.forward()).backward();
  const auto grads = io::loadSafetensors(dir / "lora_grads.safetensors");
  const auto after = io::loadSafetensors(dir / "lora_after_adamw.safetensors");
  const auto sd = f.net->stateDict(keyPrefix);
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

// The file's LoRA exported in every form of the family (`rules`) and read back onto the
// base gives output_lora again. Takes the network off f's model first.
template <class F>
void expectLoraFormsRoundTrip(F& f, const nn::LoraNameRules& rules) {
  const auto weights = f.net->moduleWeights();
  f.net.reset();
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

}  // namespace strata::parity
