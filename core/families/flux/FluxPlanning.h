#pragma once
// FLUX.1's side of planning a run (as families/llama/LlamaPlanning is Llama's), from
// the config alone (no weights are read; a checkpoint's headers at most): the
// model's shape, the tokens of a sample, the planner's per-unit input, the FLOPs of
// a step and the modules beside the transformer (T5, CLIP, VAE: the caching phase).
// train::prepareRun reaches them through the family (train/ModelFamily.h).
#include <cstdint>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "models/flux/FluxConfig.h"
#include "placement/Planner.h"
#include "train/RunPlanning.h"

namespace strata::families {

// `base` (a preset or a checkpoint's shapes) with the config's explicit shape
// keys applied (model.num_layers, in_channels, ...), then validated.
flux::FluxConfig withShapeOverrides(flux::FluxConfig base, const config::ModelConfig& m);

// The model's shape: the checkpoint's headers when weights are read (random_weights
// off, model.name_or_path given and present here), else the preset (tiny, or
// flux-dev; a preview may be made on a machine that lacks the file); then the
// overrides. `source` (optional) says which, for the user. Throws on a bad header.
flux::FluxConfig planFluxConfig(const config::ModelConfig& m, std::string* source = nullptr);

// Image and text tokens of one training sample, the most over the datasets. A
// latents dataset's from its files' headers (the largest latents, packed 2x2, and
// the longest 'txt'; train::readLatentsFolderShape), or, where its folder cannot be
// read here, from its resolution as below, which `note` then says. Any other
// dataset's at its largest resolution: through the VAE (8x), or the demo's pixel
// code, packed 2x2; the text tokens the trainer gives a model of this width
// (train::defaultTextTokens).
struct PlannedTokens {
  int64_t image = 0;
  int64_t text = 0;
  std::string note;  // for a latents dataset: where its tokens came from; else empty
  int64_t total() const { return image + text; }
};
PlannedTokens planTokenCounts(const config::RunConfig& cfg, const flux::FluxConfig& fc);
int64_t planTokens(const config::RunConfig& cfg, const flux::FluxConfig& fc);  // planTokenCounts(...).total()
// FLOPs of one training step of this config (flux::fluxTrainStepFlops at the
// planned tokens, the batch size and the LoRA targets of the config).
double trainStepFlops(const config::RunConfig& cfg, const flux::FluxConfig& fc);

// The modules beside the transformer that a FLUX.1 run holds on its first
// device (`device`: "cuda:0", "cpu"), for the planner. The order a run follows,
// all before the transformer is built and placed: the VAE (its compute dtype)
// loads and encodes the images (batches of kCacheBatchSize); then T5 and CLIP
// (bf16 on a GPU, float32 on the cpu) load beside it, encode the captions and
// the sample prompts, and are freed before step 1; the VAE stays for the whole
// run and decodes the samples, one at a time. Only an `images` dataset needs them (shapes,
// synthetic and latents datasets bring their own embeddings): otherwise none.
// Shapes: the files of model.name_or_path (+ vae_path, clip_path, t5_path) when
// read (random_weights off), else FLUX.1's presets. `note` (optional) says which
// parts, their dtype, bytes and source, and what the activations are sized for,
// or why there are none. Throws for a file that is here but unreadable.
std::vector<placement::OtherModule> fluxOtherModules(const config::RunConfig& cfg, const std::string& device,
                                                     std::string* note = nullptr);

// Per-unit parameters and LoRA-targeted Linears (network.target_modules), the
// cost options of the config (dtype, rank, EMA, batch, checkpointing), the
// placement mode and ai-toolkit's other-module scale (the other modules
// themselves depend on the first device: prepareRun adds them).
train::RunPlanInput runPlanInput(const config::RunConfig& cfg, const flux::FluxConfig& fc, int64_t tokens);
// FLUX.1's blocks keep less than PyTorch's placement default of 18 (the fused paths
// keep no GELU output and no [attention, MLP] concatenation). Measured on an H200
// (2026-12-01), 1024 px without checkpointing, the default LoRA targets: 47.0 GiB
// peak, 23.5 GiB of it weights, LoRA, gradients and optimizer state; over 57 blocks
// of 4608 tokens x 3072 in bf16 (1.5 GiB per element) that is 15.6; rounded up.
inline constexpr double kFluxActivationElementsPerTokenPerHidden = 16.0;

}  // namespace strata::families
