#pragma once
// The VAE fixture checks shared by the CPU parity test (label parity) and its
// CUDA version (tests/gpu, label gpu): a "vae" folder's encode and decode, and
// the VAE of a "flux_pipeline" folder (diffusers vae/ and ldm ae.safetensors).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <filesystem>
#include <map>
#include <string>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux/FluxSampling.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "parity/FluxFixture.h"

namespace strata::parity {

// Where a flux_pipeline folder keeps its VAE: the diffusers pipeline folder and
// the ComfyUI-style single file (README: model/ and singles/ae.safetensors).
inline std::filesystem::path pipelineModelDir(const std::filesystem::path& dir) { return dir / "model"; }
inline std::filesystem::path pipelineAeFile(const std::filesystem::path& dir) {
  return dir / "singles" / "ae.safetensors";
}

// A vae folder: encode(image) -> latent_mean / latent_logvar, decode(latent_mean)
// -> decoded, in float32 on `device`, at the manifest's tolerance. Returns the
// model so callers can time it.
inline std::shared_ptr<vae::AutoencoderKL> expectVaeFolderMatches(const std::filesystem::path& dir,
                                                                  const nlohmann::json& manifest,
                                                                  const at::Device& device) {
  const auto cfg = vae::VaeConfig::fromDiffusersJson(manifest.at("config"));
  const auto tol = toleranceOf(manifest);
  auto model = std::make_shared<vae::AutoencoderKL>(cfg, vae::VaeBuildOptions{device, at::kFloat});
  vae::loadVaeWeights(*model, dir / "vae.safetensors");
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  at::NoGradGuard noGrad;
  const auto dist = model->encode(in.at("image"));
  EXPECT_EQ(dist.mean.device(), device);
  EXPECT_TRUE(test::allClose(dist.mean, out.at("latent_mean"), tol.atol, tol.rtol)) << "latent_mean";
  EXPECT_TRUE(test::allClose(dist.logvar, out.at("latent_logvar"), tol.atol, tol.rtol)) << "latent_logvar";
  EXPECT_TRUE(test::allClose(model->decode(out.at("latent_mean").to(device)), out.at("decoded"), tol.atol, tol.rtol))
      << "decode(latent_mean)";
  return model;
}

// A flux_pipeline folder's VAE from the diffusers folder, float32 on `device`.
inline std::shared_ptr<vae::AutoencoderKL> pipelineVae(const std::filesystem::path& dir, const at::Device& device) {
  return vae::loadAutoencoderKL(pipelineModelDir(dir), {device, at::kFloat});
}

// The pipeline's VAE numbers: the encoded image and its training latents
// ((mean - shift) * scale, packed 2x2), and the decode of the final latents
// (with and without the LoRA) to the pipeline's [0, 1] image.
inline void expectPipelineVaeMatches(vae::AutoencoderKL& model, const std::filesystem::path& dir,
                                     const nlohmann::json& manifest) {
  const auto tol = toleranceOf(manifest);
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  at::NoGradGuard noGrad;
  const auto dist = model.encode(in.at("image"));
  EXPECT_TRUE(test::allClose(dist.mean, out.at("vae_latent_mean"), tol.atol, tol.rtol)) << "vae_latent_mean";
  EXPECT_TRUE(test::allClose(dist.logvar, out.at("vae_latent_logvar"), tol.atol, tol.rtol)) << "vae_latent_logvar";
  const auto train = model.toTrainingLatents(dist.mean);  // [B, C, h, w]
  EXPECT_TRUE(test::allClose(train, out.at("train_latents"), tol.atol, tol.rtol)) << "train_latents";
  EXPECT_TRUE(test::allClose(flux::packLatents(train), out.at("train_latents_packed"), tol.atol, tol.rtol))
      << "train_latents_packed";

  // Latent size: the manifest's latent_hw, else the pipeline's rule 2 * (H // (2 * vae_scale_factor)).
  const int64_t f = manifest.value("vae_scale_factor", model.config().downscaleFactor());
  const int64_t h = manifest.contains("latent_hw") ? manifest["latent_hw"].at(0).get<int64_t>()
                                                   : 2 * (manifest.at("height").get<int64_t>() / (2 * f));
  const int64_t w = manifest.contains("latent_hw") ? manifest["latent_hw"].at(1).get<int64_t>()
                                                   : 2 * (manifest.at("width").get<int64_t>() / (2 * f));
  for (const auto& [latents, image] :
       {std::pair<std::string, std::string>{"latents_final", "image"}, {"latents_final_lora", "image_lora"}}) {
    const auto unpacked = flux::unpackLatents(out.at(latents), h, w);  // [B, C, h, w] training latents
    const auto decoded = model.decode(model.fromTrainingLatents(unpacked.to(model.device())));
    if (latents == "latents_final")
      EXPECT_TRUE(test::allClose(decoded, out.at("decoded"), tol.atol, tol.rtol)) << "decoded";
    EXPECT_TRUE(test::allClose((decoded / 2 + 0.5).clamp(0, 1), out.at(image), tol.atol, tol.rtol)) << image;
  }
}

}  // namespace strata::parity
