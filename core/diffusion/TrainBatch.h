#pragma once
// What the flow-matching image families' runs share in a micro-step before their
// model's own packing: the draw (the run's data order, an unreadable item skipped
// with a warning), the stacking, caption dropout, then the noise and timesteps.
// Each sample's random numbers come from generators of its own (RunContext::sampleGenerator:
// caption dropout, then noise and timestep), so a family that packs its latents first
// (FLUX.2's 2x2 patchify) draws the noise in its packed shape.
#include <ATen/ATen.h>

#include <cstdint>

#include "config/RunConfig.h"
#include "train/Datasets.h"
#include "train/TextEmbedder.h"
#include "train/RunContext.h"

namespace strata::diffusion {

// txt [N, D] to exactly `tokens` rows (zero padding or truncation).
at::Tensor fitTokens(const at::Tensor& txt, int64_t tokens);

// The next readable item of the run's data order (RunContext::nextDrawIndex); an
// item that fails to load is skipped, counted in the cursor's skippedItems and
// said (WarningEvent at `step`). Throws IoError when none of `data` can be read.
train::TrainItem nextReadableItem(train::RunContext& run, const train::Dataset& data, int64_t step);

struct DrawnBatch {
  at::Tensor latents;  // [B, C, H, W]
  at::Tensor text;     // [B, tokens, D]
  at::Tensor pooled;   // [B, P]; undefined when the model takes none
};

struct DrawOptions {
  int64_t tokens = 0;  // text rows per sample; 0: the first item's
  bool pooled = true;  // stack the items' pooled vectors (and drop them with the caption)
};

// `batch` items stacked (one item: a view of it), latents of one size (else strata::Error naming the two
// captions), each caption dropped (replaced by `emptyPrompt`) with probability
// train.caption_dropout_rate, drawn from sample b's own generator
// (RunContext::sampleGenerator): a batch is the micro-batch being drawn.
DrawnBatch drawBatch(train::RunContext& run, const train::Dataset& data, const train::TextEmbedding& emptyPrompt,
                     int64_t batch, const DrawOptions& options, int64_t step);

// FamilyRun::microBatchShapeChange of an image family whose micro-batch shapes follow
// its items' (the noise, timesteps and ids follow the latents): "" where `data`'s items
// keep one shape (Dataset::oneItemShape), else why they may not.
std::string itemShapeChange(const train::Dataset& data);

struct NoisedBatch {
  at::Tensor noisy;   // x_t, like the latents
  at::Tensor target;  // noise - latents, like the latents
  at::Tensor sigmas;  // [B]: the timesteps
};

// Noise like `latents` and timesteps by train.timestep_type, shifted by `mu`;
// latents[b]'s from sample b's own generator (RunContext::sampleGenerator), so a
// sample's noise does not depend on the batch or the rank that holds it. The numbers
// are drawn on the host; `noisy` and `target` are computed on the latents' device,
// `sigmas` stay on the host.
NoisedBatch noiseBatch(train::RunContext& run, const at::Tensor& latents, double mu);

}  // namespace strata::diffusion
