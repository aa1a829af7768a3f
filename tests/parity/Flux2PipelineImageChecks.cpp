// The whole FLUX.2 pipeline of every "flux2_pipeline" folder as a user calls it
// (families/flux2/Flux2Pipeline through diffusion::generateImages, the path of
// `strata-train sample`): prompt TEXT through the templates, tokenizer and text
// encoder, the reference's noise through the sampler with the folder's guidance,
// the final latents through the VAE to the image, with and without
// lora.safetensors, from model/ (diffusers) and from singles/ (BFL transformer,
// flux2-vae.safetensors, the text encoder folder).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "diffusion/GenerateImages.h"
#include "families/flux2/Flux2Pipeline.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/vae/VaeConfig.h"
#include "parity/Flux2PipelineFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using parity::Flux2PipelineFixture;

families::Flux2PipelineFiles filesOf(const Flux2PipelineFixture& f, bool singles) {
  auto files = families::Flux2PipelineFiles::fromDiffusersFolder(f.modelDir());
  if (!singles) return files;
  auto s = families::Flux2PipelineFiles::fromSingleFiles(f.singleTransformer(), f.singleVae(), files.text);
  // What single files cannot tell, as a user gives it: rotary axes, the VAE's
  // group count, whether [klein] is step-distilled.
  const auto& c = f.manifest.at("config");
  s.axesDimsRope = c.at("transformer").at("axes_dims_rope").get<std::vector<int64_t>>();
  s.vaeHints = vae::VaeHints::of(vae::VaeConfig::fromDiffusersJson(c.at("vae")));
  s.distilled = files.distilled;
  return s;
}

void checkImages(const fs::path& dir, const nlohmann::json& manifest, bool singles) {
  const Flux2PipelineFixture f(dir, manifest);
  families::Flux2PipelineOptions options;
  options.text.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
  auto pipe = families::Flux2Pipeline::load(filesOf(f, singles), options);
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

}  // namespace
}  // namespace strata

STRATA_PARITY_CHECK("flux2_pipeline", "pipeline: final image from the prompt text, with and without the LoRA (model/)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkImages(d, m, false); });
STRATA_PARITY_CHECK("flux2_pipeline",
                    "pipeline: final image from the prompt text, with and without the LoRA (singles/)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkImages(d, m, true); });
