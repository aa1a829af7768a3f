// Parity of the AutoencoderKL with the reference fixtures of kind "vae", and the
// VAE inside every "flux_pipeline" folder (its diffusers vae/ and its ldm
// ae.safetensors). Architecture and tolerance come from each folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <chrono>
#include <iostream>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "parity/ParityRegistry.h"
#include "parity/VaeFixture.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

std::map<std::string, std::vector<int64_t>> shapesOf(const fs::path& file) {
  const auto f = io::SafetensorsFile::open(file);
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& n : f.names()) out[n] = f.info(n).shape;
  return out;
}

void checkVaeConfigAndKeys(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = vae::VaeConfig::fromDiffusersJson(manifest.at("config"));
  const auto shapes = shapesOf(dir / "vae.safetensors");
  EXPECT_EQ(vae::vaeParamShapes(cfg), shapes) << "the manifest's config does not give the file's key set";
  EXPECT_EQ(vae::vaeConfigFromShapes(shapes, vae::VaeHints::of(cfg)), cfg) << "config detected from the shapes";
  vae::AutoencoderKL model(cfg);
  std::map<std::string, std::vector<int64_t>> modelShapes;
  for (const auto& p : model.named_parameters(true)) modelShapes[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(modelShapes, shapes) << "named_parameters() differs from the diffusers key set";
}

void checkVaeEncodeDecode(const fs::path& dir, const nlohmann::json& manifest) {
  const auto model = parity::expectVaeFolderMatches(dir, manifest, at::kCPU);
  // Speed at the fixture's shape (no assertion: a figure for the report).
  const auto image = io::loadSafetensors(dir / "inputs.safetensors").at("image");
  at::NoGradGuard noGrad;
  model->encode(image);  // warm-up
  int runs = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (runs < 3 || seconds < 0.5) {
    model->encode(image);
    ++runs;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::cout << "[parity]     CPU encode " << image.sizes() << " float32, " << at::get_num_threads()
            << " threads: " << runs * image.size(0) / seconds << " images/s" << std::endl;
}

// The model written in ldm names and read back is the same model.
void checkVaeLdmRoundTrip(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = vae::VaeConfig::fromDiffusersJson(manifest.at("config"));
  vae::AutoencoderKL model(cfg);
  vae::loadVaeWeights(model, dir / "vae.safetensors");
  test::TempDir tmp;
  io::writeSafetensors(tmp / "ae.safetensors", vae::vaeStateDict(model, vae::VaeWeightFormat::Ldm));
  const auto ckpt = vae::VaeCheckpoint::open(tmp / "ae.safetensors");
  EXPECT_EQ(ckpt.format(), vae::VaeWeightFormat::Ldm);
  EXPECT_EQ(ckpt.config(vae::VaeHints::of(cfg)), cfg);
  vae::AutoencoderKL back(cfg);
  vae::loadVaeWeights(back, ckpt);
  const auto original = model.named_parameters(true);
  for (const auto& p : back.named_parameters(true))
    EXPECT_TRUE(test::allClose(p.value(), original[p.key()], 0, 0)) << p.key();
}

// model/vae (diffusers) and singles/ae.safetensors (ldm) are the same weights,
// and the model written in ldm names is that file, tensor for tensor.
void checkPipelineVaeWeights(const fs::path& dir, const nlohmann::json& manifest) {
  const auto expected = vae::VaeConfig::fromDiffusersJson(manifest.at("config").at("vae"));
  const auto diffusers = vae::VaeCheckpoint::open(parity::pipelineModelDir(dir));
  EXPECT_EQ(diffusers.format(), vae::VaeWeightFormat::Diffusers);
  EXPECT_EQ(diffusers.config(), expected) << diffusers.configJsonPath();
  const auto ae = vae::VaeCheckpoint::open(parity::pipelineAeFile(dir));
  EXPECT_EQ(ae.format(), vae::VaeWeightFormat::Ldm);
  // A single file cannot say its group count or latent factors: the pipeline's config does.
  EXPECT_EQ(ae.config(vae::VaeHints::of(expected)), expected);

  vae::AutoencoderKL fromDiffusers(expected), fromAe(expected);
  vae::loadVaeWeights(fromDiffusers, diffusers);
  vae::loadVaeWeights(fromAe, ae);
  const auto a = fromDiffusers.named_parameters(true);
  for (const auto& p : fromAe.named_parameters(true))
    EXPECT_TRUE(test::allClose(p.value(), a[p.key()], 0, 0)) << p.key();

  const auto ldm = vae::vaeStateDict(fromDiffusers, vae::VaeWeightFormat::Ldm);
  EXPECT_EQ(ldm.size(), ae.shapes().size());
  for (const auto& [key, t] : ldm) {
    if (!ae.shapes().count(key)) {
      ADD_FAILURE() << "ldm name " << key << " is not in " << ae.path();
      continue;
    }
    EXPECT_EQ(t.sizes().vec(), ae.shapes().at(key)) << key;
    EXPECT_TRUE(test::allClose(t, ae.tensor(key), 0, 0)) << key;
  }
}

void checkPipelineVaeLatents(const fs::path& dir, const nlohmann::json& manifest) {
  auto model = parity::pipelineVae(dir, at::kCPU);
  parity::expectPipelineVaeMatches(*model, dir, manifest);
  // From the single file too (the same numbers through the other loader).
  const auto hints = vae::VaeHints::of(model->config());
  auto single = vae::loadAutoencoderKL(parity::pipelineAeFile(dir), {}, hints);
  parity::expectPipelineVaeMatches(*single, dir, manifest);
}

}  // namespace

STRATA_PARITY_CHECK("vae", "config and named_parameters() from the weights' shapes", checkVaeConfigAndKeys);
STRATA_PARITY_CHECK("vae", "encode -> latent mean/logvar, decode(mean)", checkVaeEncodeDecode);
STRATA_PARITY_CHECK("vae", "written in ldm names and read back", checkVaeLdmRoundTrip);
STRATA_PARITY_CHECK("flux_pipeline", "VAE: model/vae (diffusers) = singles/ae.safetensors (ldm), tensor for tensor",
                    checkPipelineVaeWeights);
STRATA_PARITY_CHECK("flux_pipeline",
                    "VAE: training latents of the encoded image, decode of the final latents (with/without LoRA)",
                    checkPipelineVaeLatents);
