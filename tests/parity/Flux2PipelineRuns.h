#pragma once
// The FLUX.2 sampler and the whole FLUX.2 pipeline of a "flux2_pipeline" folder
// against its reference, on any device: the CPU parity checks
// (Flux2PipelineSamplingChecks.cpp, Flux2PipelineImageChecks.cpp) and their CUDA
// twins (tests/gpu/test_flux2_pipeline_gpu.cpp) run these.
//   expectFlux2SamplingMatches: from the reference's prompt embeddings, the
//     schedule-driven latents after every step and the final latents with the
//     folder's guidance (dev: the guidance embedding; klein base: true CFG against
//     the empty prompt; distilled klein: one pass), with and without lora.safetensors;
//   expectFlux2PipelineImagesMatch: prompt TEXT to image through
//     families/flux2/Flux2Pipeline and diffusion::generateImages (the path of
//     `strata-train sample`), with and without the LoRA.
// `single`: the BFL files of singles/ instead of model/.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "diffusion/GenerateImages.h"
#include "families/flux2/Flux2Pipeline.h"
#include "io/DiffusersFolder.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "models/vae/VaeConfig.h"
#include "parity/Flux2PipelineFixture.h"

namespace strata::parity {

// The folder's transformer, float32 on `device`: the diffusers component of
// model/, or the BFL file with what it cannot tell (rotary axes) from the manifest.
inline std::shared_ptr<flux2::Flux2Transformer> flux2PipelineTransformer(const Flux2PipelineFixture& f, bool single,
                                                                         const at::Device& device) {
  if (!single) return flux2::loadFlux2Transformer(f.modelDir(), {device, at::kFloat});
  const auto base = flux2::Flux2Config::fromDiffusersJson(f.manifest.at("config").at("transformer"));
  const auto cfg = flux2::flux2ConfigFromCheckpoint(f.singleTransformer(), base);
  return flux2::loadFlux2Transformer(f.singleTransformer(), {device, at::kFloat}, cfg);
}

// Samples the reference's noise from its prompt embeddings on the model's device;
// every step's latents (CPU) go to `steps` when given.
inline at::Tensor sampleFlux2Fixture(flux2::Flux2Transformer& model, const Flux2PipelineFixture& f,
                                     const at::Device& device, std::vector<at::Tensor>* steps = nullptr) {
  const auto mode = flux2::guidanceModeOf(model.config(), io::diffusersPipelineInfo(f.modelDir()).distilled);
  const double scale = f.manifest.at("guidance_scale").get<double>();
  const auto noise = f.inputs.at("noise_packed").to(device);
  const auto sigmas = flux2::samplingSigmas(f.manifest.at("num_inference_steps").get<int64_t>(), noise.size(1));
  const auto onStep = [steps](int64_t, const at::Tensor& x) {
    if (steps) steps->push_back(x.cpu());
  };
  const auto ids = f.inputs.at("latent_ids").to(device);
  const auto txt = f.outputs.at("prompt_embeds").to(device);
  const auto txtIds = f.outputs.at("text_ids").to(device);
  // The folder's own account of its guidance must agree with the one Strata derives.
  EXPECT_EQ(flux2::runsNegativePass(mode, scale), f.manifest.at("true_cfg").get<bool>())
      << "true CFG (" << flux2::toString(mode) << ")";
  at::NoGradGuard noGrad;
  if (flux2::runsNegativePass(mode, scale)) {
    if (!f.outputs.count("negative_prompt_embeds")) {
      ADD_FAILURE() << "a true-CFG folder without negative_prompt_embeds";
      return at::Tensor();
    }
    const auto neg = f.outputs.at("negative_prompt_embeds").to(device);
    const auto negIds = flux2::textIds(neg.size(1)).unsqueeze(0).expand({neg.size(0), neg.size(1), 4}).to(device);
    return flux2::samplePackedTrueCfg(model, noise, ids, txt, txtIds, neg, negIds, scale, sigmas, nullptr, onStep)
        .cpu();
  }
  return flux2::samplePacked(model, noise, ids, txt, txtIds, scale, sigmas, nullptr, onStep).cpu();
}

inline void expectFlux2SamplingMatches(const Flux2PipelineFixture& f, bool single, const at::Device& device) {
  const auto model = flux2PipelineTransformer(f, single, device);
  std::vector<at::Tensor> steps;
  const auto final = sampleFlux2Fixture(*model, f, device, &steps);
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
  const auto withLora = sampleFlux2Fixture(*model, f, device);
  const auto loraTol = f.toleranceFor("latents_final_lora");
  EXPECT_TRUE(test::allClose(withLora, f.outputs.at("latents_final_lora"), loraTol.atol, loraTol.rtol))
      << "latents_final_lora";
  net->detach();
  EXPECT_TRUE(test::allClose(sampleFlux2Fixture(*model, f, device), f.outputs.at("latents_final"), tol.atol, tol.rtol))
      << "latents_final after the LoRA is taken off";
}

// The pipeline's files: model/, or singles/ with the text encoder of model/ and
// what single files cannot tell as a user gives it (rotary axes, the VAE's group
// count, whether [klein] is step-distilled).
inline families::Flux2PipelineFiles flux2PipelineFiles(const Flux2PipelineFixture& f, bool single) {
  auto files = families::Flux2PipelineFiles::fromDiffusersFolder(f.modelDir());
  if (!single) return files;
  auto s = families::Flux2PipelineFiles::fromSingleFiles(f.singleTransformer(), f.singleVae(), files.text);
  const auto& c = f.manifest.at("config");
  s.axesDimsRope = c.at("transformer").at("axes_dims_rope").get<std::vector<int64_t>>();
  s.vaeHints = vae::VaeHints::of(vae::VaeConfig::fromDiffusersJson(c.at("vae")));
  s.distilled = files.distilled;
  return s;
}

inline void expectFlux2PipelineImagesMatch(const Flux2PipelineFixture& f, bool single, const at::Device& device) {
  const auto& manifest = f.manifest;
  families::Flux2PipelineOptions options;
  options.device = device;
  options.text.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
  auto pipe = families::Flux2Pipeline::load(flux2PipelineFiles(f, single), options);
  EXPECT_EQ(flux2::runsNegativePass(pipe->guidanceMode(), manifest.at("guidance_scale").get<double>()),
            manifest.at("true_cfg").get<bool>());

  diffusion::ImageRequest r;
  r.prompts = manifest.at("prompts").get<std::vector<std::string>>();
  // The reference's noise is patchified [B, 4C, h/2, w/2]; the codec's latents are not.
  r.latents = flux2::unpatchifyLatents(f.inputs.at("noise"));
  r.steps = manifest.at("num_inference_steps").get<int64_t>();
  r.guidance = manifest.at("guidance_scale").get<double>();
  r.width = manifest.at("width").get<int64_t>();
  r.height = manifest.at("height").get<int64_t>();
  int64_t calls = 0;
  r.onStep = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, ++calls);
    EXPECT_EQ(total, r.steps);
  };
  const auto packed = [](const at::Tensor& latents) { return flux2::packLatents(flux2::patchifyLatents(latents)); };

  const auto base = diffusion::generateImages(pipe->textEncoder(), pipe->codec(), pipe->denoiser(), r);
  EXPECT_EQ(calls, r.steps);
  auto tol = f.toleranceFor("latents_final");
  EXPECT_TRUE(test::allClose(packed(base.latents), f.outputs.at("latents_final"), tol.atol, tol.rtol))
      << "latents_final";
  tol = f.toleranceFor("image");
  EXPECT_TRUE(test::allClose(base.images, f.outputs.at("image"), tol.atol, tol.rtol)) << "image";

  r.onStep = {};
  r.lora = f.loraFile();  // alpha/r from its lora_adapter_metadata header
  const auto withLora = diffusion::generateImages(pipe->textEncoder(), pipe->codec(), pipe->denoiser(), r);
  tol = f.toleranceFor("latents_final_lora");
  EXPECT_TRUE(test::allClose(packed(withLora.latents), f.outputs.at("latents_final_lora"), tol.atol, tol.rtol))
      << "latents_final_lora";
  tol = f.toleranceFor("image_lora");
  EXPECT_TRUE(test::allClose(withLora.images, f.outputs.at("image_lora"), tol.atol, tol.rtol)) << "image_lora";
}

}  // namespace strata::parity
