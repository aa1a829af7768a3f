// Parity of FLUX.2's VAE (AutoencoderKLFlux2) with every "flux2_pipeline" folder:
// its config and key set, the diffusers folder and BFL's single file as the same
// weights, and from each of them the encode, the training latents and the
// decoded images (Flux2PipelineVaeFixture.h, shared with the CUDA twin), plus the
// image path's codec. Shapes, eps and tolerances come from each folder.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "parity/Flux2PipelineFixture.h"
#include "parity/Flux2PipelineVaeFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;

Shapes shapesOf(const fs::path& file) {
  const auto f = io::SafetensorsFile::open(file);
  Shapes out;
  for (const auto& n : f.names()) out[n] = f.info(n).shape;
  return out;
}

void checkConfigAndKeys(const fs::path& dir, const nlohmann::json& manifest) {
  const parity::Flux2PipelineFixture f(dir, manifest);
  const auto cfg = parity::flux2PipelineVaeConfig(f);
  EXPECT_EQ(cfg.cls, vae::VaeClass::AutoencoderKLFlux2);
  auto declared = manifest.at("config").at("vae");
  declared["_class_name"] = "AutoencoderKLFlux2";  // the manifest lists the arguments only
  EXPECT_EQ(vae::VaeConfig::fromDiffusersJson(declared), cfg) << "the manifest's config and vae/config.json differ";
  EXPECT_EQ(vae::VaeConfig::fromDiffusersJson(cfg.toDiffusersJson()), cfg) << "toDiffusersJson round trip";

  // The diffusers file: every parameter, the batch norm's statistics and its counter.
  const auto fileShapes = shapesOf(f.modelDir() / "vae" / "diffusion_pytorch_model.safetensors");
  Shapes expected = vae::vaeParamShapes(cfg);
  for (const auto& [key, shape] : vae::vaeBufferShapes(cfg)) expected[key] = shape;
  expected[vae::kVaeBatchNormCounterKey] = {};
  EXPECT_EQ(expected, fileShapes) << "the config does not give the diffusers file's key set";
  vae::AutoencoderKL model(cfg);
  Shapes modelShapes;
  for (const auto& p : model.named_parameters(true)) modelShapes[p.key()] = p.value().sizes().vec();
  for (const auto& b : model.named_buffers(true)) modelShapes[b.key()] = b.value().sizes().vec();
  expected.erase(vae::kVaeBatchNormCounterKey);
  EXPECT_EQ(modelShapes, expected) << "named_parameters() + named_buffers() differ from the diffusers key set";

  // Detected from the shapes alone: a FLUX.2 VAE by its bn.running_* (in both namings), the
  // latent channels and patch from bn's size; the group count and eps come from the hints.
  const auto hints = vae::VaeHints::of(cfg);
  EXPECT_EQ(vae::vaeConfigFromShapes(fileShapes, hints), cfg) << "config from the diffusers shapes";
  const auto single = vae::VaeCheckpoint::open(f.singleVae());
  EXPECT_EQ(single.format(), vae::VaeWeightFormat::LdmFlux2);
  EXPECT_EQ(single.config(hints), cfg) << "config from " << f.singleVae();
  vae::VaeHints groupsOnly;
  groupsOnly.normNumGroups = cfg.normNumGroups;
  const auto detected = single.config(groupsOnly);
  EXPECT_EQ(detected.cls, vae::VaeClass::AutoencoderKLFlux2);
  EXPECT_EQ(detected.latentChannels, cfg.latentChannels);
  EXPECT_EQ(detected.batchNormChannels(), cfg.batchNormChannels());
  EXPECT_EQ(detected.decoderChannels(), cfg.decoderChannels());
}

// model/vae (diffusers) and singles/flux2-vae.safetensors (ldm + BFL's quant conv
// names) hold the same weights and statistics, and the model written in that
// naming is that file, tensor for tensor.
void checkSingleFileIsTheFolder(const fs::path& dir, const nlohmann::json& manifest) {
  const parity::Flux2PipelineFixture f(dir, manifest);
  const auto cfg = parity::flux2PipelineVaeConfig(f);
  const auto fromFolder = parity::flux2PipelineVae(f, /*single=*/false, at::kCPU);
  const auto fromSingle = parity::flux2PipelineVae(f, /*single=*/true, at::kCPU);
  EXPECT_EQ(fromSingle->config(), cfg);
  const auto a = fromFolder->named_parameters(true);
  for (const auto& p : fromSingle->named_parameters(true))
    EXPECT_TRUE(test::allClose(p.value(), a[p.key()], 0, 0)) << p.key();
  EXPECT_TRUE(test::allClose(fromSingle->bn->runningMean, fromFolder->bn->runningMean, 0, 0)) << "bn.running_mean";
  EXPECT_TRUE(test::allClose(fromSingle->bn->runningVar, fromFolder->bn->runningVar, 0, 0)) << "bn.running_var";
  // Loaded, not left at BatchNorm2d's initial statistics.
  EXPECT_FALSE(test::allClose(fromFolder->bn->runningVar, at::ones_like(fromFolder->bn->runningVar), 0, 0));

  const auto single = vae::VaeCheckpoint::open(f.singleVae());
  const auto written = vae::vaeStateDict(*fromFolder, vae::VaeWeightFormat::LdmFlux2);
  EXPECT_EQ(written.size(), single.shapes().size());
  for (const auto& [key, t] : written) {
    if (!single.shapes().count(key)) {
      ADD_FAILURE() << "ldm (FLUX.2) name " << key << " is not in " << single.path();
      continue;
    }
    EXPECT_EQ(t.sizes().vec(), single.shapes().at(key)) << key;
    EXPECT_TRUE(test::allClose(t, single.tensor(key), 0, 0)) << key;
  }
}

void checkFromFolder(const fs::path& dir, const nlohmann::json& manifest) {
  const parity::Flux2PipelineFixture f(dir, manifest);
  auto model = parity::flux2PipelineVae(f, /*single=*/false, at::kCPU);
  parity::expectFlux2PipelineVaeMatches(*model, f);
}

void checkFromSingleFile(const fs::path& dir, const nlohmann::json& manifest) {
  const parity::Flux2PipelineFixture f(dir, manifest);
  auto model = parity::flux2PipelineVae(f, /*single=*/true, at::kCPU);
  parity::expectFlux2PipelineVaeMatches(*model, f);
}

void checkCodec(const fs::path& dir, const nlohmann::json& manifest) {
  const parity::Flux2PipelineFixture f(dir, manifest);
  parity::expectFlux2CodecMatches(parity::flux2PipelineVae(f, /*single=*/false, at::kCPU), f, "model/vae");
}

}  // namespace

STRATA_PARITY_CHECK("flux2_pipeline", "VAE: config.json, the key set, detection from the shapes (both namings)",
                    checkConfigAndKeys);
STRATA_PARITY_CHECK("flux2_pipeline",
                    "VAE: singles/flux2-vae.safetensors = model/vae tensor for tensor, and written back",
                    checkSingleFileIsTheFolder);
STRATA_PARITY_CHECK(
    "flux2_pipeline",
    "VAE from model/vae: latent mode, training latents (packed, ids), decoded images (with/without LoRA)",
    checkFromFolder);
STRATA_PARITY_CHECK("flux2_pipeline",
                    "VAE from singles/flux2-vae.safetensors: latent mode, training latents, decoded images",
                    checkFromSingleFile);
STRATA_PARITY_CHECK("flux2_pipeline", "VAE as the image path's codec (Flux2VaeCodec): encode, normalize, decode",
                    checkCodec);
