// The whole FLUX.1 pipeline of every "flux_pipeline" folder, through
// core/pipeline as a user calls it: prompt embeddings from the prompt TEXT (the
// tokenizers included), and the final image of FluxPipeline.__call__ from the
// given latents with and without lora.safetensors, loaded from model/ (diffusers)
// and from singles/ (BFL transformer, ldm ae, clip_l, t5xxl + model/'s tokenizers).
// The per-encoder and VAE checks on the same folder are in TextEncoderChecks.cpp
// and VaeChecks.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/clip/ClipTextConfig.h"
#include "models/flux/FluxTransformer.h"
#include "models/vae/VaeConfig.h"
#include "parity/FluxFixture.h"
#include "parity/ParityRegistry.h"
#include "parity/TextEncoderFixture.h"
#include "families/flux/FluxPipeline.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

std::vector<std::string> promptsOf(const nlohmann::json& manifest) {
  return manifest.at("prompts").get<std::vector<std::string>>();
}

families::PipelineOptions optionsOf(const nlohmann::json& manifest) {
  families::PipelineOptions o;
  o.text.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
  return o;
}

families::PipelineFiles filesOf(const fs::path& dir, const nlohmann::json& manifest, bool singles) {
  if (!singles) return families::PipelineFiles::fromDiffusersFolder(dir / "model");
  auto f = families::PipelineFiles::fromSingleFiles(
      dir / parity::singleFileOf(manifest, "transformer in BFL"), dir / parity::singleFileOf(manifest, "VAE in"),
      dir / parity::singleFileOf(manifest, "CLIPTextModel"), dir / parity::singleFileOf(manifest, "T5EncoderModel"),
      dir / "model");
  // What single files cannot tell, as a user would give it: rotary axes, VAE
  // group count and scale/shift, CLIP's head count.
  const auto& c = manifest.at("config");
  f.axesDimsRope = c.at("transformer").at("axes_dims_rope").get<std::vector<int64_t>>();
  f.vaeHints = vae::VaeHints::of(vae::VaeConfig::fromDiffusersJson(c.at("vae")));
  f.text.clipConfig = clip::ClipTextConfig::fromTransformersJson(c.at("text_encoder"));
  return f;
}

void checkPromptEmbeddingsFromText(const fs::path& dir, const nlohmann::json& manifest, bool singles) {
  const auto tol = parity::toleranceOf(manifest);
  auto files = filesOf(dir, manifest, singles);
  auto enc = families::FluxTextEncoders::load(files.text, optionsOf(manifest).text);
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  const auto prompts = promptsOf(manifest);
  EXPECT_EQ(enc->clipLength(), manifest.at("clip_max_length").get<int64_t>());
  EXPECT_TRUE(test::allClose(enc->t5Ids(prompts), out.at("t5_input_ids"), 0, 0)) << "t5_input_ids";
  EXPECT_TRUE(test::allClose(enc->clipIds(prompts), out.at("clip_input_ids"), 0, 0)) << "clip_input_ids";
  const auto e = enc->encode(prompts);
  EXPECT_TRUE(test::allClose(e.t5, out.at("prompt_embeds"), tol.atol, tol.rtol)) << "prompt_embeds";
  EXPECT_TRUE(test::allClose(e.pooled, out.at("pooled_prompt_embeds"), tol.atol, tol.rtol)) << "pooled_prompt_embeds";
  // The manifest says which prompts the reference tokenizers cut.
  const auto& cut = manifest.at("truncated_prompts");
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto was = [&](const char* which) {
      for (const auto& i : cut.at(which))
        if (i.get<size_t>() == b) return true;
      return false;
    };
    EXPECT_EQ(e.clipDroppedTokens.at(b) > 0, was("clip")) << "clip truncation of prompt " << b;
    EXPECT_EQ(e.t5DroppedTokens.at(b) > 0, was("t5")) << "t5 truncation of prompt " << b;
  }
  enc->release();
  EXPECT_THROW(enc->encode(prompts), Error);
}

void checkImages(const fs::path& dir, const nlohmann::json& manifest, bool singles) {
  const auto tol = parity::toleranceOf(manifest);
  auto pipe = families::FluxPipeline::load(filesOf(dir, manifest, singles), optionsOf(manifest));
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  EXPECT_NEAR(flux::shiftMu(manifest.at("image_seq_len").get<int64_t>(), pipe->shiftParams()),
              manifest.at("mu").get<double>(), 1e-9);
  families::SampleRequest r;
  r.prompts = promptsOf(manifest);
  r.latents = in.at("latents");  // unpacked [B, C, h, w]: packed by the pipeline
  r.steps = manifest.at("num_inference_steps").get<int64_t>();
  r.guidance = manifest.at("guidance_scale").get<double>();
  r.width = manifest.at("width").get<int64_t>();
  r.height = manifest.at("height").get<int64_t>();
  int64_t calls = 0;
  r.onStep = [&](int64_t done, int64_t total) {
    ++calls;
    EXPECT_EQ(done, calls);
    EXPECT_EQ(total, r.steps);
  };
  const auto base = families::generateImages(*pipe, r);
  EXPECT_EQ(calls, r.steps);
  EXPECT_TRUE(test::allClose(base.finalLatents, out.at("latents_final"), tol.atol, tol.rtol)) << "latents_final";
  EXPECT_TRUE(test::allClose(base.images, out.at("image"), tol.atol, tol.rtol)) << "image";

  r.lora = dir / "lora.safetensors";  // alpha/r from its lora_adapter_metadata header
  r.onStep = {};
  const auto withLora = families::generateImages(*pipe, r);
  EXPECT_TRUE(test::allClose(withLora.finalLatents, out.at("latents_final_lora"), tol.atol, tol.rtol))
      << "latents_final_lora";
  EXPECT_TRUE(test::allClose(withLora.images, out.at("image_lora"), tol.atol, tol.rtol)) << "image_lora";

  // The LoRA is gone afterwards, and the packed form of the latents gives the same image.
  r.lora.clear();
  r.latents = in.at("latents_packed");
  const auto again = families::generateImages(*pipe, r);
  EXPECT_TRUE(test::allClose(again.images, out.at("image"), tol.atol, tol.rtol)) << "image after the LoRA run";
}

}  // namespace
}  // namespace strata

STRATA_PARITY_CHECK("flux_pipeline", "pipeline: prompt embeddings from the prompt text (model/)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::checkPromptEmbeddingsFromText(d, m, false);
                    });
STRATA_PARITY_CHECK("flux_pipeline", "pipeline: prompt embeddings from the prompt text (singles/ + tokenizers)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      strata::checkPromptEmbeddingsFromText(d, m, true);
                    });
STRATA_PARITY_CHECK("flux_pipeline", "pipeline: final image with and without lora.safetensors (model/)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkImages(d, m, false); });
STRATA_PARITY_CHECK("flux_pipeline", "pipeline: final image with and without lora.safetensors (singles/)",
                    [](const fs::path& d, const nlohmann::json& m) { strata::checkImages(d, m, true); });
