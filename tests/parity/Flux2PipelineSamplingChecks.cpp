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

#include <filesystem>

#include "common/TestSupport.h"
#include "models/flux2/Flux2Sampling.h"
#include "parity/Flux2PipelineFixture.h"
#include "parity/Flux2PipelineRuns.h"
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

}  // namespace
}  // namespace strata

STRATA_PARITY_CHECK("flux2_pipeline", "sampling: empirical mu, sigmas and timesteps",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkSchedule(d, m); });
STRATA_PARITY_CHECK("flux2_pipeline", "sampling: every step with and without lora.safetensors (model/ transformer)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::parity::expectFlux2SamplingMatches({d, m}, false, at::kCPU);
                    });
STRATA_PARITY_CHECK("flux2_pipeline", "sampling: every step with and without lora.safetensors (singles/flux2)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::parity::expectFlux2SamplingMatches({d, m}, true, at::kCPU);
                    });
