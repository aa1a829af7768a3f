#pragma once
// Small FLUX.2 configs and random inputs shared by the FLUX.2 model tests (tests/flux2).
#include <ATen/ATen.h>

#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Sampling.h"
#include "models/flux2/Flux2Transformer.h"

namespace strata::flux2::test {

// A small config unlike the reference fixture's and Flux2Config::tiny(): no guidance
// embedding, other head counts, mlp ratio, axes, theta and eps.
inline Flux2Config otherConfig() {
  Flux2Config c;
  c.inChannels = 12;
  c.outChannels = 12;
  c.numLayers = 1;
  c.numSingleLayers = 3;
  c.attentionHeadDim = 12;
  c.numAttentionHeads = 3;
  c.jointAttentionDim = 20;
  c.timestepGuidanceChannels = 64;
  c.mlpRatio = 2.5;
  c.axesDimsRope = {2, 4, 4, 2};
  c.ropeTheta = 500;
  c.eps = 1e-5;
  c.guidanceEmbeds = false;
  return c;
}

// Random model inputs of `c`'s widths: an h x w patch grid and `textTokens` text tokens
// (guidance 4, ignored without a guidance embedding).
inline Flux2Inputs randomInputs(const Flux2Config& c, int64_t batch, int64_t h, int64_t w, int64_t textTokens) {
  Flux2Inputs in;
  in.img = at::randn({batch, h * w, c.inChannels});  // [B, h w, C]
  in.txt = at::randn({batch, textTokens, c.jointAttentionDim});
  in.timestep = at::rand({batch});
  in.guidance = at::full({batch}, 4.0);
  in.imgIds = latentIds(h, w);
  in.txtIds = textIds(textTokens);
  return in;
}

}  // namespace strata::flux2::test
