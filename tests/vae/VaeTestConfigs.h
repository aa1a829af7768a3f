#pragma once
// Small AutoencoderKL configs for the VAE unit tests: every structural option
// (levels, layers, quant convs, attention) at a size a 2-core CPU runs quickly.
#include "models/vae/VaeConfig.h"

namespace strata::vae::tiny {

// FLUX layout (no quant convs), two levels.
inline VaeConfig fluxLayout() {
  VaeConfig c;
  c.blockOutChannels = {8, 16};
  c.layersPerBlock = 1;
  c.latentChannels = 4;
  c.normNumGroups = 4;
  c.sampleSize = 32;
  c.scalingFactor = 0.3611;
  c.shiftFactor = 0.1159;
  return c;
}

// SD layout (quant convs), three levels, two layers, width change at every level.
inline VaeConfig sdLayout() {
  VaeConfig c;
  c.blockOutChannels = {4, 8, 12};
  c.layersPerBlock = 2;
  c.latentChannels = 3;
  c.normNumGroups = 2;
  c.sampleSize = 64;
  c.scalingFactor = 0.18215;
  c.shiftFactor = 0.0;
  c.useQuantConv = true;
  c.usePostQuantConv = true;
  return c;
}

// No mid-block attention, only a post_quant_conv, odd channel counts.
inline VaeConfig oddLayout() {
  VaeConfig c;
  c.inChannels = 1;
  c.outChannels = 2;
  c.blockOutChannels = {6, 6, 9, 9};
  c.layersPerBlock = 3;
  c.latentChannels = 5;
  c.normNumGroups = 3;
  c.sampleSize = 48;
  c.scalingFactor = 1.5;
  c.shiftFactor = -0.25;
  c.useQuantConv = false;
  c.usePostQuantConv = true;
  c.midBlockAddAttention = false;
  c.forceUpcast = false;
  return c;
}

// FLUX.2 layout (AutoencoderKLFlux2: quant convs, 2x2 patch, batch-norm
// statistics), three levels as the flux2_pipeline fixtures have them.
inline VaeConfig flux2Layout() {
  VaeConfig c = VaeConfig::flux2();
  c.blockOutChannels = {8, 16, 16};
  c.layersPerBlock = 1;
  c.latentChannels = 4;
  c.normNumGroups = 4;
  c.sampleSize = 64;
  return c;
}

// FLUX.2 with a narrower decoder (decoder_block_out_channels), a 1x1 "patch"
// and another eps: the options other FLUX.2 VAEs may carry.
inline VaeConfig flux2NarrowDecoder() {
  VaeConfig c = flux2Layout();
  c.blockOutChannels = {8, 12};
  c.decoderBlockOutChannels = {4, 8};
  c.latentChannels = 3;
  c.patchSize = {1, 1};
  c.batchNormEps = 1e-3;
  return c;
}

}  // namespace strata::vae::tiny
