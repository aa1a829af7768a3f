#pragma once
// FLUX transformer weights on disk, through the shared DiT loader (dit/DitCheckpoint.h).
// A checkpoint is a diffusers folder (sharded *.safetensors + index JSON, or the
// model root holding transformer/), one diffusers file, or one BFL file
// (flux1-dev.safetensors; ComfyUI's "model.diffusion_model." prefix is stripped).
// Loading verifies every key and shape before any tensor is copied, so a bad
// checkpoint never leaves a half-loaded model.
#include <ATen/ATen.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dit/DitCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxTransformer.h"

namespace strata::flux {

using FluxWeightFormat = dit::WeightFormat;
using dit::toString;
using FluxStreamOptions = dit::StreamOptions;

class FluxCheckpoint : public dit::DitCheckpoint {
 public:
  // Reads the headers only (files are memory-mapped): `path` itself, or a folder's
  // transformer/. Throws IoError / LoadError.
  static FluxCheckpoint open(const std::filesystem::path& path);

 private:
  explicit FluxCheckpoint(dit::DitCheckpoint c) : dit::DitCheckpoint(std::move(c)) {}
};

// Copies every parameter of `model` from `ckpt` (diffusers or BFL names),
// converting to each parameter's dtype and device. Strict: throws LoadError
// listing every missing, unexpected and mis-shaped key (expected vs actual
// shape) before anything is copied.
void loadFluxWeights(FluxTransformer& model, const FluxCheckpoint& ckpt);
void loadFluxWeights(FluxTransformer& model, const std::filesystem::path& path);

// Builds the model block by block from `ckpt` (dit::streamModel): checked first,
// each block filled (and quantized when asked) on its device before the next exists.
std::shared_ptr<FluxTransformer> streamFluxTransformer(const FluxCheckpoint& ckpt, const FluxConfig& cfg,
                                                       FluxBuildOptions options, const FluxStreamOptions& stream = {});
// Opens `path` and detects the config as loadFluxTransformer does.
std::shared_ptr<FluxTransformer> streamFluxTransformer(const std::filesystem::path& path,
                                                       const FluxBuildOptions& options,
                                                       const FluxStreamOptions& stream = {},
                                                       const std::vector<int64_t>& axesDimsRope = {});

// Detects the config from the checkpoint (FluxConfig::fromCheckpoint) and streams
// the model in with `options`, unquantized (streamFluxTransformer).
std::shared_ptr<FluxTransformer> loadFluxTransformer(const std::filesystem::path& path, const FluxBuildOptions& options,
                                                     const std::vector<int64_t>& axesDimsRope = {});

// The model's weights in BFL single-file naming (fused qkv / linear1, final
// modulation halves swapped), CPU tensors in the model's dtype. Both throw
// strata::Error on a model with a quantized Linear (nn/QuantizedWrite.h).
std::vector<std::pair<std::string, at::Tensor>> bflStateDict(FluxTransformer& model);
// The model's weights in diffusers naming (named_parameters), CPU tensors.
std::vector<std::pair<std::string, at::Tensor>> diffusersStateDict(FluxTransformer& model);

}  // namespace strata::flux
