// Parity of the text encoders with the reference fixtures: kinds "t5_encoder"
// (transformers T5EncoderModel) and "clip_text" (CLIPTextModel), and the prompt
// embeddings of a "flux_pipeline" folder (FluxPipeline.encode_prompt: T5
// last_hidden_state, CLIP pooled) from its diffusers folder and its single files.
// Config, file names and token ids come from each folder's manifest and files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/clip/ClipTextModel.h"
#include "models/flux/FluxSampling.h"
#include "models/t5/T5Checkpoint.h"
#include "models/t5/T5Encoder.h"
#include "parity/FluxFixture.h"
#include "parity/ParityRegistry.h"
#include "parity/TextEncoderFixture.h"

namespace fs = std::filesystem;
using namespace strata;

using strata::test::relL2;

namespace {

using parity::toleranceOf;

// bf16 keeps 8 mantissa bits: the stated tolerance for a bf16 forward of these
// encoders (relative L2 over the whole output, as for the FLUX transformer).
// T5 attention is not scaled by 1/sqrt(d_kv), so its logits are large and their
// bf16 rounding moves the softmax more (transformers computes them in bf16 too):
// measured 2.6e-2 on t5_encoder_a, hence T5's looser bound.
constexpr double kBf16MaxRelL2 = 2e-2;
constexpr double kT5Bf16MaxRelL2 = 5e-2;

std::map<std::string, std::vector<int64_t>> shapesOf(torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : m.named_parameters(true)) out[p.key()] = p.value().sizes().vec();
  return out;
}

int64_t countOf(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// ---- t5_encoder ------------------------------------------------------------------

void checkT5Keys(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = t5::T5Config::fromTransformersJson(manifest.at("config"));
  t5::T5Encoder model(cfg);
  const auto ckpt = t5::T5Checkpoint::open(dir / parity::weightsFileOf(manifest));
  EXPECT_EQ(shapesOf(model), ckpt.shapes()) << "named_parameters() differs from the transformers key set";
  // Shapes give back everything the weights hold (max distance and activation are T5 v1.1's).
  const auto fromShapes = t5::T5Config::fromShapes(ckpt.shapes());
  EXPECT_EQ(fromShapes.vocabSize, cfg.vocabSize);
  EXPECT_EQ(fromShapes.dModel, cfg.dModel);
  EXPECT_EQ(fromShapes.dKv, cfg.dKv);
  EXPECT_EQ(fromShapes.dFf, cfg.dFf);
  EXPECT_EQ(fromShapes.numLayers, cfg.numLayers);
  EXPECT_EQ(fromShapes.numHeads, cfg.numHeads);
  EXPECT_EQ(fromShapes.relativeAttentionNumBuckets, cfg.relativeAttentionNumBuckets);
  EXPECT_EQ(fromShapes.gatedAct, cfg.gatedAct);
  EXPECT_EQ(t5::t5ParamPlan(cfg).totalParams(), countOf(model));
}

void checkT5Forward(const fs::path& dir, const nlohmann::json& manifest, at::ScalarType dtype) {
  const auto cfg = t5::T5Config::fromTransformersJson(manifest.at("config"));
  const auto tol = toleranceOf(manifest);
  t5::T5BuildOptions options;
  options.dtype = dtype;
  auto model = t5::loadT5Encoder(dir / parity::weightsFileOf(manifest), options, cfg);
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("last_hidden_state");
  const at::Tensor mask = in.count("attention_mask") ? in.at("attention_mask") : at::Tensor();
  at::NoGradGuard noGrad;
  const auto out = model->forward(in.at("input_ids"), mask);
  EXPECT_EQ(out.scalar_type(), dtype);
  if (dtype == at::kFloat) {
    EXPECT_TRUE(test::allClose(out, ref, tol.atol, tol.rtol)) << "last_hidden_state";
  } else {
    const double err = relL2(out, ref);
    std::cout << "[parity]     " << c10::toString(dtype) << ": relative L2 error " << err << std::endl;
    EXPECT_LT(err, kT5Bf16MaxRelL2) << "last_hidden_state in " << c10::toString(dtype);
  }
}

// ---- clip_text ---------------------------------------------------------------------

void checkClipKeys(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = clip::ClipTextConfig::fromTransformersJson(manifest.at("config"));
  clip::ClipTextModel model(cfg);
  const auto ckpt = clip::ClipCheckpoint::open(dir / parity::weightsFileOf(manifest));
  EXPECT_EQ(shapesOf(model), ckpt.shapes()) << "named_parameters() differs from the transformers key set";
  EXPECT_EQ(clip::clipParamPlan(cfg).totalParams(), countOf(model));
  // The head count is in no tensor: shapes give it only for CLIP's head width 64.
  if (cfg.headDim() == 64)
    EXPECT_EQ(clip::ClipTextConfig::fromShapes(ckpt.shapes()).numAttentionHeads, cfg.numAttentionHeads);
}

void checkClipForward(const fs::path& dir, const nlohmann::json& manifest, at::ScalarType dtype) {
  const auto cfg = clip::ClipTextConfig::fromTransformersJson(manifest.at("config"));
  const auto tol = toleranceOf(manifest);
  clip::ClipBuildOptions options;
  options.dtype = dtype;
  auto model = clip::loadClipTextModel(dir / parity::weightsFileOf(manifest), options, cfg);
  const auto in = io::loadSafetensors(dir / "inputs.safetensors");
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors");
  const at::Tensor mask = in.count("attention_mask") ? in.at("attention_mask") : at::Tensor();
  at::NoGradGuard noGrad;
  const auto out = model->forward(in.at("input_ids"), mask);
  if (dtype == at::kFloat) {
    EXPECT_TRUE(test::allClose(out.lastHiddenState, ref.at("last_hidden_state"), tol.atol, tol.rtol))
        << "last_hidden_state";
    EXPECT_TRUE(test::allClose(out.pooled, ref.at("pooler_output"), tol.atol, tol.rtol)) << "pooler_output";
  } else {
    const double errState = relL2(out.lastHiddenState, ref.at("last_hidden_state"));
    const double errPooled = relL2(out.pooled, ref.at("pooler_output"));
    std::cout << "[parity]     " << c10::toString(dtype) << ": relative L2 error " << errState << " (states), "
              << errPooled << " (pooled)" << std::endl;
    EXPECT_LT(errState, kBf16MaxRelL2);
    EXPECT_LT(errPooled, kBf16MaxRelL2);
  }
}

// ---- flux_pipeline: prompt embeddings --------------------------------------------

// The pipeline's tokenizer output (the manifest's outputs hold the ids it gave),
// encoded with T5 from `t5Path` and CLIP from `clipPath`.
void checkPromptEmbeddings(const fs::path& dir, const nlohmann::json& manifest, const fs::path& t5Path,
                           const fs::path& clipPath, bool singleFiles) {
  const auto tol = toleranceOf(manifest);
  const auto& configs = manifest.at("config");
  const auto t5Cfg = t5::T5Config::fromTransformersJson(configs.at("text_encoder_2"));
  const auto clipCfg = clip::ClipTextConfig::fromTransformersJson(configs.at("text_encoder"));
  std::shared_ptr<t5::T5Encoder> t5;
  std::shared_ptr<clip::ClipTextModel> clipModel;
  if (singleFiles) {
    // A single file holds no config: the T5 shapes must give the manifest's one,
    // CLIP's head count is in no tensor, so the manifest supplies it.
    const auto detected = t5::T5Checkpoint::open(t5Path).config();
    EXPECT_EQ(detected, t5Cfg) << "T5 config from the single file's shapes";
    t5 = t5::loadT5Encoder(t5Path, {}, detected);
    clipModel = clip::loadClipTextModel(clipPath, {}, clipCfg);
  } else {
    // From the folder alone: config.json decides, and must agree with the manifest.
    EXPECT_EQ(t5::T5Checkpoint::open(t5Path).config(), t5Cfg);
    EXPECT_EQ(clip::ClipCheckpoint::open(clipPath).config(), clipCfg);
    t5 = t5::loadT5Encoder(t5Path);
    clipModel = clip::loadClipTextModel(clipPath);
  }
  const auto out = io::loadSafetensors(dir / "outputs.safetensors");
  const auto& t5Ids = out.at("t5_input_ids");  // [B, max_sequence_length]
  EXPECT_EQ(t5Ids.size(1), manifest.at("max_sequence_length").get<int64_t>());
  EXPECT_EQ(out.at("clip_input_ids").size(1), manifest.at("clip_max_length").get<int64_t>());
  at::NoGradGuard noGrad;
  // FluxPipeline passes neither encoder an attention mask.
  const auto promptEmbeds = t5->forward(t5Ids);
  EXPECT_TRUE(test::allClose(promptEmbeds, out.at("prompt_embeds"), tol.atol, tol.rtol)) << "prompt_embeds";
  const auto pooled = clipModel->forward(out.at("clip_input_ids")).pooled;
  EXPECT_TRUE(test::allClose(pooled, out.at("pooled_prompt_embeds"), tol.atol, tol.rtol)) << "pooled_prompt_embeds";
  EXPECT_TRUE(test::allClose(flux::textIds(t5Ids.size(1)), out.at("text_ids"), 0, 0)) << "text_ids";
}

}  // namespace

STRATA_PARITY_CHECK("t5_encoder", "named_parameters() = transformers key set; config from shapes; parameter plan",
                    checkT5Keys);
STRATA_PARITY_CHECK("t5_encoder", "last_hidden_state (float32)",
                    [](const fs::path& d, const nlohmann::json& m) { checkT5Forward(d, m, at::kFloat); });
STRATA_PARITY_CHECK("t5_encoder", "last_hidden_state in bf16 (rel. L2 < 5e-2)",
                    [](const fs::path& d, const nlohmann::json& m) { checkT5Forward(d, m, at::kBFloat16); });
STRATA_PARITY_CHECK("clip_text", "named_parameters() = transformers key set; parameter plan", checkClipKeys);
STRATA_PARITY_CHECK("clip_text", "last_hidden_state and pooler_output (float32)",
                    [](const fs::path& d, const nlohmann::json& m) { checkClipForward(d, m, at::kFloat); });
STRATA_PARITY_CHECK("clip_text", "last_hidden_state and pooler_output in bf16 (rel. L2 < 2e-2)",
                    [](const fs::path& d, const nlohmann::json& m) { checkClipForward(d, m, at::kBFloat16); });
STRATA_PARITY_CHECK("flux_pipeline", "prompt embeddings from model/ (text_encoder_2 = T5, text_encoder = CLIP)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      // The pipeline root: model_index.json says which folder is which.
                      checkPromptEmbeddings(d, m, d / "model", d / "model", /*singleFiles=*/false);
                    });
STRATA_PARITY_CHECK("flux_pipeline", "prompt embeddings from singles/ (T5 and CLIP-L single files)",
                    [](const fs::path& d, const nlohmann::json& m) {
                      checkPromptEmbeddings(d, m, d / parity::singleFileOf(m, "T5EncoderModel"),
                                            d / parity::singleFileOf(m, "CLIPTextModel"), /*singleFiles=*/true);
                    });
