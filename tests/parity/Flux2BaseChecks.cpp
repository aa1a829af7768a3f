// Parity of the FLUX.2 base transformer and the Flux2Pipeline sampling helpers with
// the reference fixtures of kind "flux2_transformer" (diffusers, float32, CPU).
// Every check reads the architecture, the sampling settings and the tolerance
// from the folder's manifest.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Layout.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"
#include "parity/FluxFixture.h"
#include "parity/Flux2Fixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

using parity::flux2ConfigOf;
using parity::flux2InputsOf;
using parity::toleranceOf;

void checkKeySet(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux2ConfigOf(manifest);
  flux2::Flux2Transformer model(cfg);
  std::map<std::string, std::vector<int64_t>> modelShapes;
  for (const auto& p : model.named_parameters(true)) modelShapes[p.key()] = p.value().sizes().vec();
  const auto fileShapes = parity::safetensorsShapes(dir / "transformer.safetensors");
  EXPECT_EQ(modelShapes, fileShapes) << "named_parameters() differs from the diffusers key set";
  // The shapes of either file give back the manifest's architecture (axes, theta, eps are not in the weights).
  EXPECT_EQ(flux2::Flux2Config::fromShapes(fileShapes, cfg), cfg) << "from diffusers shapes";
  EXPECT_EQ(flux2::flux2ConfigFromCheckpoint(dir / "transformer_bfl.safetensors", cfg), cfg) << "from BFL shapes";
  int64_t params = 0;
  for (const auto& p : model.parameters()) params += p.numel();
  EXPECT_EQ(flux2::flux2ParamPlan(cfg).totalParams(), params);
}

void checkForward(const fs::path& dir, const nlohmann::json& manifest, const std::string& weightsFile) {
  const auto cfg = flux2ConfigOf(manifest);
  const auto tol = toleranceOf(manifest);
  flux2::Flux2Transformer model(cfg);
  flux2::loadFlux2Weights(model, dir / weightsFile);
  const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
  const auto outputs = io::loadSafetensors(dir / "outputs.safetensors");
  at::NoGradGuard noGrad;
  const auto out = model.forward(flux2InputsOf(inputs));
  EXPECT_TRUE(test::allClose(out, outputs.at("output"), tol.atol, tol.rtol)) << weightsFile;
}

// bf16: at parity::kBf16Atol / kBf16Rtol / kBf16MaxRelL2 (FluxFixture.h).
void checkForwardBf16(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux2ConfigOf(manifest);
  flux2::Flux2BuildOptions options;
  options.dtype = at::kBFloat16;
  flux2::Flux2Transformer model(cfg, options);
  flux2::loadFlux2Weights(model, dir / "transformer_bfl.safetensors");
  const auto inputs = io::loadSafetensors(dir / "inputs.safetensors");
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("output");
  at::NoGradGuard noGrad;
  const auto out = model.forward(flux2InputsOf(inputs));
  parity::expectBf16Forward(out, ref);
}

// BFL names load the very same numbers, and the model written back in BFL names
// is the BFL file tensor for tensor.
void checkBflSameNumbers(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux2ConfigOf(manifest);
  flux2::Flux2Transformer fromDiffusers(cfg), fromBfl(cfg);
  flux2::loadFlux2Weights(fromDiffusers, dir / "transformer.safetensors");
  flux2::loadFlux2Weights(fromBfl, dir / "transformer_bfl.safetensors");
  const auto a = fromDiffusers.named_parameters(true);
  const auto b = fromBfl.named_parameters(true);
  for (const auto& p : a) EXPECT_TRUE(test::allClose(p.value(), b[p.key()], 0, 0)) << p.key();
  const auto bfl = io::loadSafetensors(dir / "transformer_bfl.safetensors");
  const auto written = flux2::flux2BflStateDict(fromDiffusers);
  EXPECT_EQ(written.size(), bfl.size());
  for (const auto& [key, t] : written) {
    ASSERT_TRUE(bfl.count(key)) << "flux2BflStateDict wrote '" << key << "', the BFL file has no such key";
    EXPECT_TRUE(test::allClose(t, bfl.at(key), 0, 0)) << key;
  }
}

// Flux2Pipeline's latent helpers on the fixture's inputs: patchify, pack, ids.
void checkLatentHelpers(const fs::path& dir, const nlohmann::json&) {
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  const auto& vae = in.at("vae_latents");  // [B, C, H, W]
  const auto patchified = flux2::patchifyLatents(vae);
  EXPECT_TRUE(test::allClose(patchified, in.at("latents_patchified"), 0, 0)) << "patchifyLatents";
  EXPECT_TRUE(test::allClose(flux2::unpatchifyLatents(patchified), vae, 0, 0)) << "unpatchifyLatents";
  const auto packed = flux2::packLatents(patchified);
  EXPECT_TRUE(test::allClose(packed, in.at("hidden_states"), 0, 0)) << "packLatents";
  const auto ids = flux2::latentIds(patchified.size(2), patchified.size(3));
  const auto& imgIds = in.at("img_ids");  // [B, N, 4]
  for (int64_t b = 0; b < imgIds.size(0); ++b) EXPECT_TRUE(test::allClose(ids, imgIds[b], 0, 0)) << "img_ids " << b;
  EXPECT_TRUE(test::allClose(flux2::unpackLatentsWithIds(packed, imgIds), patchified, 0, 0)) << "unpackLatentsWithIds";
  const auto& txtIds = in.at("txt_ids");  // [B, L, 4]
  for (int64_t b = 0; b < txtIds.size(0); ++b)
    EXPECT_TRUE(test::allClose(flux2::textIds(txtIds.size(1)), txtIds[b], 0, 0)) << "txt_ids " << b;
  if (out.count("sample_noise_packed"))
    EXPECT_TRUE(test::allClose(flux2::packLatents(out.at("sample_noise")), out.at("sample_noise_packed"), 0, 0))
        << "sample_noise packed";
}

void checkSample(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux2ConfigOf(manifest);
  const auto tol = toleranceOf(manifest);
  const auto& sampling = manifest.at("sampling");
  const int64_t steps = sampling.at("steps").get<int64_t>();
  const double guidance = sampling.value("guidance_scale", 4.0);  // Flux2Pipeline's default
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  const auto& noise = out.at("sample_noise");  // patchified [B, 4C, h, w]
  const auto packedNoise = flux2::packLatents(noise);
  const auto ids = flux2::latentIds(noise.size(2), noise.size(3));

  const int64_t seqLen = packedNoise.size(1);
  if (sampling.contains("image_seq_len")) EXPECT_EQ(seqLen, sampling.at("image_seq_len").get<int64_t>());
  EXPECT_NEAR(flux2::computeEmpiricalMu(seqLen, steps), sampling.at("mu").get<double>(), 1e-9) << "mu";
  const auto sigmas = flux2::samplingSigmas(steps, seqLen);
  EXPECT_TRUE(test::allClose(sigmas, out.at("sample_sigmas"), 1e-7, 1e-6)) << "sigmas";
  EXPECT_TRUE(test::allClose(sigmas.narrow(0, 0, steps) * 1000, out.at("sample_timesteps"), 1e-4, 1e-6)) << "timesteps";

  flux2::Flux2Transformer model(cfg);
  flux2::loadFlux2Weights(model, dir / "transformer.safetensors");
  const auto& stepRef = out.at("sample_step_latents");  // [steps, B, N, C]
  EXPECT_EQ(stepRef.size(0), steps);
  const auto txtIds = flux2::textIds(in.at("encoder_hidden_states").size(1));
  const auto final = flux2::samplePacked(model, packedNoise, ids, in.at("encoder_hidden_states"), txtIds, guidance,
                                         sigmas, nullptr, [&](int64_t step, const at::Tensor& x) {
                                           EXPECT_TRUE(test::allClose(x, stepRef[step - 1], tol.atol, tol.rtol))
                                               << "latents after step " << step;
                                         });
  EXPECT_TRUE(test::allClose(final, out.at("sample_final"), tol.atol, tol.rtol)) << "sample_final";
  const auto unpacked = flux2::unpackLatentsWithIds(final, ids);
  EXPECT_TRUE(test::allClose(unpacked, out.at("sample_unpacked"), tol.atol, tol.rtol)) << "sample_unpacked";
  EXPECT_TRUE(test::allClose(flux2::unpatchifyLatents(unpacked), out.at("sample_unpatchified"), tol.atol, tol.rtol))
      << "sample_unpatchified";
  // The convenience path: patchified noise in, patchified latents out.
  EXPECT_TRUE(test::allClose(flux2::sample(model, noise, in.at("encoder_hidden_states"), guidance, steps),
                             out.at("sample_unpacked"), tol.atol, tol.rtol))
      << "sample (patchified)";
}

}  // namespace

STRATA_PARITY_CHECK("flux2_transformer", "named_parameters() = diffusers key set; config from shapes", checkKeySet);
STRATA_PARITY_CHECK("flux2_transformer", "base forward (diffusers names)",
                    [](const fs::path& d, const nlohmann::json& m) { checkForward(d, m, "transformer.safetensors"); });
STRATA_PARITY_CHECK("flux2_transformer", "base forward (BFL names)", [](const fs::path& d, const nlohmann::json& m) {
  checkForward(d, m, "transformer_bfl.safetensors");
});
STRATA_PARITY_CHECK("flux2_transformer", "base forward in bf16 (atol 5e-2, rtol 5e-2, rel. L2 < 2e-2)",
                    checkForwardBf16);
STRATA_PARITY_CHECK("flux2_transformer", "BFL names load the same numbers; BFL state dict = the BFL file",
                    checkBflSameNumbers);
STRATA_PARITY_CHECK("flux2_transformer", "patchify, pack, unpack, img_ids, txt_ids", checkLatentHelpers);
STRATA_PARITY_CHECK("flux2_transformer", "4-step Euler sample (Flux2Pipeline schedule, empirical mu)", checkSample);
