// The LoRA files Strata writes for FLUX.2, checked against what diffusers wrote
// for the same adapters (every "flux2_pipeline" folder's lora.safetensors, from
// Flux2Pipeline.save_lora_weights): the diffusers form has the reference's keys
// and tensors (lora_B carrying alpha/r, so peft's metadata says alpha = r), the
// peft LoraConfig diffusers' Flux2LoraLoaderMixin reads; and each exported form
// (diffusers, ComfyUI with BFL's fused q/k/v and linear1, kohya), put back on
// the base model, samples the reference's latents_final_lora.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <string>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2LoraRules.h"
#include "parity/Flux2PipelineRuns.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using parity::Flux2PipelineFixture;

void expectDiffusersFormMatchesTheReference(const fs::path& ours, const Flux2PipelineFixture& f) {
  const auto mine = io::loadSafetensors(ours);
  const auto ref = io::loadSafetensors(f.loraFile());
  std::set<std::string> mineKeys, refKeys;
  for (const auto& [k, v] : mine) mineKeys.insert(k);
  for (const auto& [k, v] : ref) refKeys.insert(k);
  EXPECT_EQ(mineKeys, refKeys) << "the diffusers form's keys are Flux2Pipeline.save_lora_weights'";
  const double scale = f.manifest.at("lora").at("scale").get<double>();  // alpha / r
  for (const auto& [key, t] : ref) {
    if (!mine.count(key)) continue;
    // lora_B carries alpha/r (the file then says alpha = r): the same product B A.
    const bool up = key.find(".lora_B.") != std::string::npos;
    EXPECT_TRUE(test::allClose(mine.at(key), up ? t * scale : t, 1e-7, 1e-6)) << key;
  }
  const auto meta = io::SafetensorsFile::open(ours).metadata();
  ASSERT_TRUE(meta.count("lora_adapter_metadata")) << "peft's LoraConfig for diffusers' loader";
  const auto config = nlohmann::json::parse(meta.at("lora_adapter_metadata"));
  const int64_t rank = f.manifest.at("lora").at("rank").get<int64_t>();
  EXPECT_EQ(config.at("transformer.r").get<int64_t>(), rank);
  EXPECT_EQ(config.at("transformer.lora_alpha").get<double>(), static_cast<double>(rank));
  std::set<std::string> targets;
  for (const auto& t : config.at("transformer.target_modules")) targets.insert(t.get<std::string>());
  for (const auto& m : f.manifest.at("lora").at("modules"))
    EXPECT_TRUE(targets.count(m.get<std::string>())) << m << " missing from target_modules";
}

void checkExports(const fs::path& dir, const nlohmann::json& manifest) {
  const Flux2PipelineFixture f(dir, manifest);
  const auto model = parity::flux2PipelineTransformer(f, false, at::kCPU);
  const flux2::Flux2LoraRules rules(model->config());
  test::TempDir tmp;
  struct Form {
    lora::LoraFileFormat format;
    const char* file;
  };
  const Form forms[] = {{lora::LoraFileFormat::Diffusers, "diffusers.safetensors"},
                        {lora::LoraFileFormat::Comfy, "comfy.safetensors"},
                        {lora::LoraFileFormat::Kohya, "kohya.safetensors"}};
  {
    auto net = lora::loadLoraNetwork(*model, rules, f.loraFile());
    for (const auto& form : forms) {
      lora::LoraExportOptions o;
      o.format = form.format;
      lora::writeLoraFile(tmp / form.file, *net, rules, o);
    }
    net->detach();
  }
  expectDiffusersFormMatchesTheReference(tmp / "diffusers.safetensors", f);
  // The ComfyUI form names BFL's modules: fused q/k/v and linear1 under "diffusion_model.",
  // and only lora_A / lora_B with alpha/r folded in: diffusers' FLUX.2 converter of this
  // form refuses any other key (".alpha" included), and ComfyUI scales by 1 without one.
  const auto comfy = io::SafetensorsFile::open(tmp / "comfy.safetensors").names();
  bool fusedQkv = false;
  const auto endsWith = [](const std::string& k, const std::string& tail) {
    return k.size() >= tail.size() && k.compare(k.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& k : comfy) {
    EXPECT_EQ(k.rfind("diffusion_model.", 0), 0u) << k;
    EXPECT_TRUE(endsWith(k, ".lora_A.weight") || endsWith(k, ".lora_B.weight")) << k;
    fusedQkv = fusedQkv || k.find(".img_attn.qkv.") != std::string::npos;
  }
  EXPECT_TRUE(fusedQkv) << "the ComfyUI form fuses q/k/v as BFL's checkpoint does";

  const auto tol = f.toleranceFor("latents_final_lora");
  for (const auto& form : forms) {
    auto net = lora::loadLoraNetwork(*model, rules, tmp / form.file);
    EXPECT_TRUE(test::allClose(parity::sampleFlux2Fixture(*model, f, at::kCPU), f.outputs.at("latents_final_lora"),
                               tol.atol, tol.rtol))
        << form.file << ": latents_final_lora";
    net->detach();
  }
}

}  // namespace
}  // namespace strata

STRATA_PARITY_CHECK("flux2_pipeline",
                    "LoRA exports: the diffusers form = save_lora_weights' file; every form samples it",
                    strata::checkExports);
