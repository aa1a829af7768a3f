// The whole FLUX.2 pipeline of every "flux2_pipeline" folder as a user calls it
// (families/flux2/Flux2Pipeline through diffusion::generateImages, the path of
// `strata-train sample`): prompt TEXT through the templates, tokenizer and text
// encoder, the reference's noise through the sampler with the folder's guidance,
// the final latents through the VAE to the image, with and without
// lora.safetensors, from model/ (diffusers) and from singles/ (BFL transformer,
// flux2-vae.safetensors, the text encoder folder). Parity/Flux2PipelineRuns.h.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "parity/Flux2PipelineRuns.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;

STRATA_PARITY_CHECK("flux2_pipeline", "pipeline: final image from the prompt text, with and without the LoRA (model/)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::parity::expectFlux2PipelineImagesMatch({d, m}, false, at::kCPU);
                    });
STRATA_PARITY_CHECK("flux2_pipeline",
                    "pipeline: final image from the prompt text, with and without the LoRA (singles/)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::parity::expectFlux2PipelineImagesMatch({d, m}, true, at::kCPU);
                    });
