// The FLUX.2 sampler of every "flux2_pipeline" folder, from the reference's prompt
// embeddings: the schedule (empirical mu, sigmas, timesteps), the latents after
// every step and the final latents, with the guidance the folder's model takes
// (FLUX.2-dev: the guidance embedding; klein base: true CFG against the empty
// prompt's embeddings; klein distilled: one pass), with and without lora.safetensors,
// from the diffusers transformer (model/) and from the BFL file (singles/).
// The text encoder and the VAE of the same folders are checked in
// Flux2PipelineTextChecks.cpp and Flux2PipelineVaeChecks.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "io/DiffusersFolder.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "parity/Flux2PipelineFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using parity::Flux2PipelineFixture;

int64_t stepsOf(const Flux2PipelineFixture& f) { return f.manifest.at("num_inference_steps").get<int64_t>(); }

void checkSchedule(const fs::path& dir, const nlohmann::json& manifest) {
  const Flux2PipelineFixture f(dir, manifest);
  const int64_t steps = stepsOf(f);
  const int64_t tokens = f.inputs.at("noise_packed").size(1);
  EXPECT_EQ(tokens, manifest.at("image_seq_len").get<int64_t>());
  EXPECT_NEAR(flux2::computeEmpiricalMu(tokens, steps), manifest.at("mu").get<double>(), 1e-9);
  const auto sigmas = flux2::samplingSigmas(steps, tokens);
  const auto tol = f.toleranceFor("sigmas");
  EXPECT_TRUE(test::allClose(sigmas, f.outputs.at("sigmas"), tol.atol, tol.rtol)) << "sigmas";
  EXPECT_TRUE(test::allClose(sigmas.slice(0, 0, steps) * 1000, f.outputs.at("timesteps"), tol.atol, tol.rtol))
      << "timesteps";
}

// The folder's transformer, float32 on the CPU: the diffusers component of
// model/, or the BFL file with what it cannot tell (rotary axes, theta) from
// model/'s config.
std::shared_ptr<flux2::Flux2Transformer> transformerOf(const Flux2PipelineFixture& f, bool single) {
  if (!single) return flux2::loadFlux2Transformer(f.modelDir());
  const auto base = flux2::Flux2Config::fromDiffusersJson(f.manifest.at("config").at("transformer"));
  const auto cfg = flux2::flux2ConfigFromCheckpoint(f.singleTransformer(), base);
  auto model = std::make_shared<flux2::Flux2Transformer>(cfg);
  flux2::loadFlux2Weights(*model, f.singleTransformer());
  return model;
}

// Samples the reference's noise from its prompt embeddings; every step's latents
// go to `steps` when given.
at::Tensor sampleFixture(flux2::Flux2Transformer& model, const Flux2PipelineFixture& f,
                         std::vector<at::Tensor>* steps = nullptr) {
  const auto mode = flux2::guidanceModeOf(model.config(), io::diffusersPipelineInfo(f.modelDir()).distilled);
  const double scale = f.manifest.at("guidance_scale").get<double>();
  const auto& noise = f.inputs.at("noise_packed");
  const auto sigmas = flux2::samplingSigmas(stepsOf(f), noise.size(1));
  const auto onStep = [steps](int64_t, const at::Tensor& x) {
    if (steps) steps->push_back(x.clone());
  };
  const auto& ids = f.inputs.at("latent_ids");
  const auto& txt = f.outputs.at("prompt_embeds");
  const auto& txtIds = f.outputs.at("text_ids");
  // The folder's own account of its guidance must agree with the one Strata derives.
  EXPECT_EQ(flux2::runsNegativePass(mode, scale), f.manifest.at("true_cfg").get<bool>())
      << "true CFG (" << flux2::toString(mode) << ")";
  at::NoGradGuard noGrad;
  if (flux2::runsNegativePass(mode, scale)) {
    if (!f.outputs.count("negative_prompt_embeds")) {
      ADD_FAILURE() << "a true-CFG folder without negative_prompt_embeds";
      return at::Tensor();
    }
    const auto& neg = f.outputs.at("negative_prompt_embeds");
    const auto negIds = flux2::textIds(neg.size(1)).unsqueeze(0).expand({neg.size(0), neg.size(1), 4});
    return flux2::samplePackedTrueCfg(model, noise, ids, txt, txtIds, neg, negIds, scale, sigmas, nullptr, onStep);
  }
  return flux2::samplePacked(model, noise, ids, txt, txtIds, scale, sigmas, nullptr, onStep);
}

void checkSampling(const fs::path& dir, const nlohmann::json& manifest, bool single) {
  const Flux2PipelineFixture f(dir, manifest);
  const auto model = transformerOf(f, single);
  std::vector<at::Tensor> steps;
  const auto final = sampleFixture(*model, f, &steps);
  ASSERT_TRUE(final.defined());
  const auto& ref = f.outputs.at("step_latents");  // [steps, B, N, C]
  ASSERT_EQ(static_cast<int64_t>(steps.size()), ref.size(0));
  const auto stepTol = f.toleranceFor("step_latents");
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_TRUE(test::allClose(steps[i], ref[static_cast<int64_t>(i)], stepTol.atol, stepTol.rtol))
        << "step_latents[" << i << "]";
  const auto tol = f.toleranceFor("latents_final");
  EXPECT_TRUE(test::allClose(final, f.outputs.at("latents_final"), tol.atol, tol.rtol)) << "latents_final";

  // lora.safetensors as Flux2Pipeline.save_lora_weights wrote it ("transformer."
  // names, alpha in its metadata), on and off again.
  auto net = lora::loadLoraNetwork(*model, flux2::Flux2LoraRules(model->config()), f.loraFile());
  const auto withLora = sampleFixture(*model, f);
  const auto loraTol = f.toleranceFor("latents_final_lora");
  EXPECT_TRUE(test::allClose(withLora, f.outputs.at("latents_final_lora"), loraTol.atol, loraTol.rtol))
      << "latents_final_lora";
  net->detach();
  EXPECT_TRUE(test::allClose(sampleFixture(*model, f), f.outputs.at("latents_final"), tol.atol, tol.rtol))
      << "latents_final after the LoRA is taken off";
}

}  // namespace
}  // namespace strata

STRATA_PARITY_CHECK("flux2_pipeline", "sampling: empirical mu, sigmas and timesteps",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkSchedule(d, m); });
STRATA_PARITY_CHECK("flux2_pipeline", "sampling: every step with and without lora.safetensors (model/ transformer)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkSampling(d, m, false); });
STRATA_PARITY_CHECK("flux2_pipeline", "sampling: every step with and without lora.safetensors (singles/flux2)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkSampling(d, m, true); });
