#pragma once
// The FLUX.2 VAE checks of a "flux2_pipeline" folder, shared by the CPU parity
// test (Flux2PipelineVaeChecks.cpp, label parity) and its CUDA twin
// (tests/gpu/test_vae_gpu.cpp, label gpu): the AutoencoderKLFlux2 from model/vae
// (diffusers) or singles/flux2-vae.safetensors (BFL ldm names), its encode, the
// training latents (patchified, batch-norm normalised, packed, their ids) and
// the decode of the final latents with and without the LoRA, each output at its
// own tolerance (Flux2PipelineFixture::toleranceFor).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "common/TestSupport.h"
#include "dit/LatentPatch.h"
#include "families/flux2/Flux2VaeCodec.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "parity/Flux2PipelineFixture.h"

namespace strata::parity {

// The VAE's config as the folder holds it (model/vae/config.json).
inline vae::VaeConfig flux2PipelineVaeConfig(const Flux2PipelineFixture& f) {
  return vae::VaeConfig::fromDiffusersJsonFile(f.modelDir() / "vae" / "config.json");
}

// The VAE loaded from the diffusers folder or from the single file (which cannot
// say its group count or eps: the folder's config gives them as hints), float32 on `device`.
inline std::shared_ptr<vae::AutoencoderKL> flux2PipelineVae(const Flux2PipelineFixture& f, bool single,
                                                            const at::Device& device) {
  if (!single) return vae::loadAutoencoderKL(f.modelDir(), {device, at::kFloat});
  return vae::loadAutoencoderKL(f.singleVae(), {device, at::kFloat}, vae::VaeHints::of(flux2PipelineVaeConfig(f)));
}

// Patchified latent rows and columns of the pipeline's images: the manifest's
// latent_hw (the VAE latents' size) over the patch.
inline std::pair<int64_t, int64_t> flux2PatchifiedHw(const Flux2PipelineFixture& f, const vae::VaeConfig& cfg) {
  const auto& hw = f.manifest.at("latent_hw");
  return {hw.at(0).get<int64_t>() / cfg.patchSize[0], hw.at(1).get<int64_t>() / cfg.patchSize[1]};
}

// Every VAE output of the folder from `model` (on any device).
inline void expectFlux2PipelineVaeMatches(vae::AutoencoderKL& model, const Flux2PipelineFixture& f) {
  auto tol = [&](const std::string& name) { return f.toleranceFor(name); };
  auto expectClose = [&](const at::Tensor& actual, const std::string& name) {
    const auto t = tol(name);
    EXPECT_TRUE(test::allClose(actual, f.outputs.at(name), t.atol, t.rtol)) << name;
  };
  at::NoGradGuard noGrad;
  const auto dist = model.encode(f.inputs.at("image"));
  expectClose(dist.mean, "vae_latent_mode");              // the posterior's mode is its mean
  const auto train = model.toTrainingLatents(dist.mean);  // [n, 4C, h/2, w/2]
  expectClose(train, "train_latents");
  expectClose(flux2::packLatents(train), "train_latents_packed");  // [n, hw/4, 4C]
  if (f.outputs.count("train_latent_ids")) {
    const auto ids = flux2::latentIds(train.size(2), train.size(3)).unsqueeze(0).expand({train.size(0), -1, -1});
    EXPECT_TRUE(test::allClose(ids, f.outputs.at("train_latent_ids"), 0, 0)) << "train_latent_ids";
  }

  // decoded = decode(unpatchify(unpack(latents_final) * sqrt(var + eps) + mean)); image = (decoded / 2 + 0.5).clamp(0,
  // 1).
  const auto [h, w] = flux2PatchifiedHw(f, model.config());
  const auto ids = flux2::latentIds(h, w);  // [h w, 4] rows (0, row, col, 0)
  for (const auto& [latents, image] :
       {std::pair<std::string, std::string>{"latents_final", "image"}, {"latents_final_lora", "image_lora"}}) {
    const auto unpacked = flux2::unpackLatentsWithIds(f.outputs.at(latents), ids);  // [B, 4C, h, w]
    const auto decoded = model.decode(model.fromTrainingLatents(unpacked.to(model.device())));
    if (latents == "latents_final") expectClose(decoded, "decoded");
    expectClose((decoded / 2 + 0.5).clamp(0, 1), image);
  }
}

// The same numbers through the image path's codec (families/flux2): encode gives
// the training latents unpatchified (the fixture's are patchified), decode the
// pipeline's image.
inline void expectFlux2CodecMatches(const std::shared_ptr<vae::AutoencoderKL>& model, const Flux2PipelineFixture& f,
                                    const std::string& weights) {
  families::Flux2VaeCodec codec(model, weights);
  const auto& cfg = model->config();
  const auto& train = f.outputs.at("train_latents");  // [n, 4C, H/2f, W/2f]
  const int64_t ph = cfg.patchSize[0], pw = cfg.patchSize[1];
  EXPECT_EQ(codec.latentChannels() * ph * pw, train.size(1));
  EXPECT_EQ(codec.downscaleFactor() * ph * train.size(2), f.inputs.at("image").size(2));
  const auto patched = [&](const at::Tensor& x) { return dit::patchifyLatents(x, ph, pw); };
  const auto t = f.toleranceFor("train_latents");
  EXPECT_TRUE(test::allClose(patched(codec.encode(f.inputs.at("image"))), train, t.atol, t.rtol)) << "codec encode";
  const auto mode = f.outputs.at("vae_latent_mode");
  EXPECT_TRUE(test::allClose(patched(codec.normalize(mode)), train, t.atol, t.rtol)) << "codec normalize";
  EXPECT_TRUE(test::allClose(codec.denormalize(codec.normalize(mode)), mode, 1e-5, 1e-5)) << "codec denormalize";
  const auto [h, w] = flux2PatchifiedHw(f, cfg);
  const auto unpacked = flux2::unpackLatentsWithIds(f.outputs.at("latents_final"), flux2::latentIds(h, w));
  const auto ti = f.toleranceFor("image");
  EXPECT_TRUE(
      test::allClose(codec.decode(dit::unpatchifyLatents(unpacked, ph, pw)), f.outputs.at("image"), ti.atol, ti.rtol))
      << "codec decode";
  codec.release();
  EXPECT_TRUE(test::allClose(patched(codec.normalize(mode)), train, t.atol, t.rtol)) << "codec normalize after release";
}

}  // namespace strata::parity
