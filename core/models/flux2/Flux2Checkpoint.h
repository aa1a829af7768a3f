#pragma once
// FLUX.2 transformer weights on disk, through the shared DiT loader
// (dit/DitCheckpoint.h): streamed block by block and quantized on load, as FLUX.1.
// A checkpoint is a diffusers folder (a pipeline folder's transformer/, or the
// transformer folder: shards + index JSON), one diffusers file, or one BFL file
// (flux2-dev.safetensors; ComfyUI's "model.diffusion_model." / "diffusion_model."
// prefix is accepted). Every key and shape is checked (io/StrictLoad) before any
// tensor is copied, so a bad file never leaves a half-loaded model; a missing,
// unknown or mis-shaped key is a LoadError naming the key and the file.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dit/DitCheckpoint.h"
#include "models/flux2/Flux2Config.h"
#include "models/flux2/Flux2Transformer.h"

namespace strata::flux2 {

using Flux2WeightFormat = dit::WeightFormat;
using dit::toString;
using Flux2StreamOptions = dit::StreamOptions;

// The weights at `path`, headers only: a pipeline folder's Flux2Transformer2DModel
// component, a transformer folder or one file.
dit::DitCheckpoint openFlux2Checkpoint(const std::filesystem::path& path);

// Copies every parameter of `model` from the weights at `path` (diffusers or BFL
// names, detected), converting to each parameter's dtype and device.
void loadFlux2Weights(Flux2Transformer& model, const std::filesystem::path& path);

// The config of the weights at `path`: shapes (headers only), with a diffusers
// folder's config.json for what the shapes do not hold (axes, theta, eps), else `base`'s.
Flux2Config flux2ConfigFromCheckpoint(const std::filesystem::path& path, const Flux2Config& base = Flux2Config{});

// Builds the model block by block from `ckpt` (dit::streamModel): every key and shape
// checked first, then each block built on its device, filled, quantized there when
// `stream.quantize` asks, and its file pages released before the next one exists.
std::shared_ptr<Flux2Transformer> streamFlux2Transformer(const dit::DitCheckpoint& ckpt, const Flux2Config& cfg,
                                                         Flux2BuildOptions options,
                                                         const Flux2StreamOptions& stream = {});

// flux2ConfigFromCheckpoint, then streamFlux2Transformer with `options`, unquantized.
std::shared_ptr<Flux2Transformer> loadFlux2Transformer(const std::filesystem::path& path,
                                                       const Flux2BuildOptions& options = {},
                                                       const Flux2Config& base = Flux2Config{});

// The model's weights in BFL naming (fused q/k/v, final modulation halves swapped),
// CPU tensors in the model's dtype: what a BFL / ComfyUI loader expects. Throws
// strata::Error on a model with a quantized Linear (nn/QuantizedWrite.h).
std::vector<std::pair<std::string, at::Tensor>> flux2BflStateDict(Flux2Transformer& model);

}  // namespace strata::flux2
