// Parity of the FLUX base transformer and its sampling helpers with the
// reference fixtures of kind "flux_transformer" (diffusers, float32, CPU).
// Every check reads the architecture and tolerance from the folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "parity/FluxFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

using parity::inputsOf;
using parity::Tolerance;
using parity::toleranceOf;

void checkForward(const fs::path& dir, const nlohmann::json& manifest, const std::string& weightsFile) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  const auto tol = toleranceOf(manifest);
  flux::FluxTransformer model(cfg);
  flux::loadFluxWeights(model, dir / weightsFile);
  const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
  const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
  at::NoGradGuard noGrad;
  const auto out = model.forward(inputsOf(inputs));
  EXPECT_TRUE(test::allClose(out, outputs.at("output"), tol.atol, tol.rtol)) << weightsFile;
}

// bf16: at parity::kBf16Atol / kBf16Rtol / kBf16MaxRelL2 (FluxFixture.h).
void checkForwardBf16(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  flux::FluxBuildOptions options;
  options.dtype = at::kBFloat16;
  flux::FluxTransformer model(cfg, options);
  flux::loadFluxWeights(model, dir / "transformer_bfl.safetensors");
  const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("output");
  at::NoGradGuard noGrad;
  const auto out = model.forward(inputsOf(inputs));
  parity::expectBf16Forward(out, ref);
}

void checkKeySet(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  flux::FluxTransformer model(cfg);
  const auto fileShapes = parity::safetensorsShapes(dir / "transformer.safetensors");
  std::map<std::string, std::vector<int64_t>> modelShapes;
  for (const auto& p : model.named_parameters(true)) modelShapes[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(modelShapes, fileShapes) << "named_parameters() differs from the diffusers key set";
  // The shapes alone give back the manifest's architecture.
  EXPECT_EQ(flux::FluxConfig::fromShapes(fileShapes, cfg.axesDimsRope), cfg);
  EXPECT_EQ(flux::FluxConfig::fromCheckpoint(dir / "transformer_bfl.safetensors", cfg.axesDimsRope), cfg);
  EXPECT_EQ(flux::fluxParamPlan(cfg).totalParams(), [&] {
    int64_t n = 0;
    for (const auto& p : model.parameters()) n += p.numel();
    return n;
  }());
}

void checkPacking(const fs::path& dir, const nlohmann::json&) {
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto& latents = in.at("latents");  // [B, C, H, W]
  const auto packed = flux::packLatents(latents);
  EXPECT_TRUE(test::allClose(packed, in.at("hidden_states"), 0, 0)) << "packLatents";
  EXPECT_TRUE(test::allClose(flux::unpackLatents(packed, latents.size(2), latents.size(3)), latents, 0, 0))
      << "unpackLatents";
  EXPECT_TRUE(test::allClose(flux::imageIds(latents.size(2), latents.size(3)), in.at("img_ids"), 0, 0)) << "img_ids";
  EXPECT_TRUE(test::allClose(flux::textIds(in.at("txt_ids").size(0)), in.at("txt_ids"), 0, 0)) << "txt_ids";
}

void checkSample(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  const auto tol = toleranceOf(manifest);
  const auto& sampling = manifest.at("sampling");
  const int64_t steps = sampling.at("steps").get<int64_t>();
  const double guidance = sampling.at("guidance").get<double>();
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  const auto& noise = out.at("sample_noise");  // packed [B, N, C]

  const double mu = flux::shiftMu(noise.size(1));
  EXPECT_NEAR(mu, sampling.at("mu").get<double>(), 1e-9) << "mu";
  const auto sigmas = flux::samplingSigmas(steps, mu);
  EXPECT_TRUE(test::allClose(sigmas, out.at("sample_sigmas"), 1e-7, 1e-6)) << "sigmas";
  EXPECT_TRUE(test::allClose(sigmas.narrow(0, 0, steps) * 1000, out.at("sample_timesteps"), 1e-4, 1e-6)) << "timesteps";

  flux::FluxTransformer model(cfg);
  flux::loadFluxWeights(model, dir / "transformer.safetensors");
  const auto final = flux::samplePacked(model, noise, in.at("img_ids"), in.at("encoder_hidden_states"),
                                        in.at("txt_ids"), in.at("pooled_projections"), guidance, sigmas);
  EXPECT_TRUE(test::allClose(final, out.at("sample_final"), tol.atol, tol.rtol)) << "sample_final";

  // The convenience path: unpacked noise in, unpacked latents out.
  const auto& unpackedRef = out.at("sample_unpacked");  // [B, C, H, W]
  const auto noiseLatents = flux::unpackLatents(noise, unpackedRef.size(2), unpackedRef.size(3));
  const auto sampled =
      flux::sample(model, noiseLatents, in.at("encoder_hidden_states"), in.at("pooled_projections"), guidance, steps);
  EXPECT_TRUE(test::allClose(sampled, unpackedRef, tol.atol, tol.rtol)) << "sample (unpacked)";
}

}  // namespace

STRATA_PARITY_CHECK("flux_transformer", "named_parameters() = diffusers key set; config from shapes", checkKeySet);
STRATA_PARITY_CHECK("flux_transformer", "base forward (diffusers names)",
                    [](const fs::path& d, const nlohmann::json& m) { checkForward(d, m, "transformer.safetensors"); });
STRATA_PARITY_CHECK("flux_transformer", "base forward (BFL names)", [](const fs::path& d, const nlohmann::json& m) {
  checkForward(d, m, "transformer_bfl.safetensors");
});
STRATA_PARITY_CHECK("flux_transformer", "base forward in bf16 (atol 5e-2, rtol 5e-2, rel. L2 < 2e-2)",
                    checkForwardBf16);
STRATA_PARITY_CHECK("flux_transformer", "latent packing, img_ids, txt_ids", checkPacking);
STRATA_PARITY_CHECK("flux_transformer", "4-step Euler sample (FLUX.1-dev schedule)", checkSample);
