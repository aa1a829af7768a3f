#pragma once
// FLUX.2 sampling and latent helpers (diffusers Flux2Pipeline): the 2x2 patchify
// of VAE latents into channels, token packing, 4-axis position ids, the
// empirical shift mu, and Euler sampling with the shared flow-match sampler
// (dit/FlowMatch.h: FLUX.1's sigmas rule, FLUX.2's empirical mu).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

#include "dit/FlowMatch.h"
#include "dit/LatentPatch.h"
#include "nn/Block.h"

namespace strata::flux2 {

class Flux2Transformer;
struct Flux2Config;

// How a FLUX.2 model is steered when it samples (Flux2Pipeline, Flux2KleinPipeline):
//   Embedded: the guidance embedding takes the scale, one pass (FLUX.2-dev);
//   TrueCfg:  a second pass on the negative prompt, v = v_neg + scale (v - v_neg),
//             when the scale is above 1 (klein base);
//   None:     one pass, the scale ignored (klein step-distilled).
enum class Flux2GuidanceMode { Embedded, TrueCfg, None };
// The mode of a model with `cfg` (its guidance embedding) and the pipeline
// folder's is_distilled (model_index.json).
Flux2GuidanceMode guidanceModeOf(const Flux2Config& cfg, bool distilled);
const char* toString(Flux2GuidanceMode mode);
// Whether a sample at `scale` runs the negative prompt too (Flux2KleinPipeline's
// do_classifier_free_guidance).
inline bool runsNegativePass(Flux2GuidanceMode mode, double scale) {
  return mode == Flux2GuidanceMode::TrueCfg && scale > 1.0;
}

// [B, C, H, W] -> [B, 4C, H/2, W/2]: each 2x2 patch into channels, order (c, dy, dx)
// (Flux2Pipeline._patchify_latents), and back (_unpatchify_latents). One copy, in
// dit/ (dit/LatentPatch.h), which FLUX.2's VAE normalisation uses too.
using dit::patchifyLatents;
using dit::unpatchifyLatents;

// [B, C, h, w] -> [B, h*w, C], tokens row-major (_pack_latents).
at::Tensor packLatents(const at::Tensor& patchified);
// Tokens back to [B, C, h, w] by their position ids (t, row, col, l): ids [B, N, 4]
// or [N, 4] (shared); h and w are the largest row / col + 1 (_unpack_latents_with_ids).
at::Tensor unpackLatentsWithIds(const at::Tensor& tokens, const at::Tensor& ids);

// Position ids of the packed image tokens of an h x w patchified latent: [h*w, 4]
// rows (0, row, col, 0), int64 (_prepare_latent_ids).
at::Tensor latentIds(int64_t height, int64_t width, const at::TensorOptions& options = at::kLong);
// Text position ids: [tokens, 4] rows (0, 0, 0, l) (_prepare_text_ids).
at::Tensor textIds(int64_t tokens, const at::TensorOptions& options = at::kLong);

// Flux2Pipeline's compute_empirical_mu (dit/FlowMatch.h).
using dit::computeEmpiricalMu;

// Sigmas of a `steps`-step sample of `imageSeqLen` tokens: linspace(1, 1/steps) in
// float32 shifted with computeEmpiricalMu (exponential), then 0: [steps + 1].
at::Tensor samplingSigmas(int64_t steps, int64_t imageSeqLen);

// Euler sampling on packed tokens: noise [B, N_img, C] packed; imgIds [N, 4] or
// [B, N, 4]; txt [B, N_txt, joint_attention_dim]; txtIds; guidance the user's scale
// (fed x1000 to the guidance embedding, ignored without one); sigmas [steps + 1].
// Returns the packed latents [B, N_img, C] float32. onStep, when set, gets the
// step number (1-based) and the latents after it.
using Flux2StepCallback = std::function<void(int64_t step, const at::Tensor& latents)>;
at::Tensor samplePacked(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                        const at::Tensor& txt, const at::Tensor& txtIds, double guidance, const at::Tensor& sigmas,
                        nn::BlockRunner* runner = nullptr, const Flux2StepCallback& onStep = {});

// samplePacked with true classifier-free guidance (Flux2KleinPipeline): each step
// runs the prompt's states `txt` and the negative prompt's `negTxt` (its own ids
// `negTxtIds`) and steps with v_neg + scale (v - v_neg); no guidance embedding input.
at::Tensor samplePackedTrueCfg(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& imgIds,
                               const at::Tensor& txt, const at::Tensor& txtIds, const at::Tensor& negTxt,
                               const at::Tensor& negTxtIds, double scale, const at::Tensor& sigmas,
                               nn::BlockRunner* runner = nullptr, const Flux2StepCallback& onStep = {});

// Convenience: patchified noise [B, 4C, h, w] -> sampled patchified latents
// [B, 4C, h, w] with the Flux2Pipeline schedule, text ids (0, 0, 0, l).
at::Tensor sample(Flux2Transformer& model, const at::Tensor& noise, const at::Tensor& txt, double guidance,
                  int64_t steps, nn::BlockRunner* runner = nullptr);

}  // namespace strata::flux2
