#pragma once
// FLUX transformer weights on disk, and the one strict loader.
// A checkpoint is a diffusers folder (sharded *.safetensors + index JSON, or the
// model root holding transformer/), one diffusers file, or one BFL file
// (flux1-dev.safetensors; ComfyUI's "model.diffusion_model." prefix is stripped).
// Loading verifies every key and shape before any tensor is copied, so a bad
// checkpoint never leaves a half-loaded model.
#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/flux/FluxConfig.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Quantize.h"

namespace strata::io {
class SafetensorsCheckpoint;
}

namespace strata::flux {

enum class FluxWeightFormat { Diffusers, Bfl };
const char* toString(FluxWeightFormat format);

class FluxCheckpoint {
 public:
  // Reads the headers only (files are memory-mapped). Throws IoError / LoadError.
  static FluxCheckpoint open(const std::filesystem::path& path);

  FluxWeightFormat format() const { return format_; }
  // Tensor name (prefix stripped) -> shape.
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  bool contains(const std::string& name) const { return shapes_.count(name) > 0; }
  // CPU tensor in the file's dtype, over the mapping (no copy). Throws LoadError if absent.
  at::Tensor tensor(const std::string& name) const;
  // Once a tensor is copied out, its file pages stop counting as resident memory.
  void releasePages(const std::string& name) const;
  // config.json next to the weights (diffusers folder), empty when there is none.
  const std::filesystem::path& configJsonPath() const { return configJson_; }
  const std::filesystem::path& path() const { return path_; }
  std::vector<std::filesystem::path> files() const;

 private:
  std::filesystem::path path_;
  std::filesystem::path configJson_;
  FluxWeightFormat format_ = FluxWeightFormat::Diffusers;
  std::shared_ptr<io::SafetensorsCheckpoint> files_;
  std::map<std::string, std::string> entries_;  // key (prefix stripped) -> name in the file
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// Copies every parameter of `model` from `ckpt` (diffusers or BFL names),
// converting to each parameter's dtype and device. Strict: throws LoadError
// listing every missing, unexpected and mis-shaped key (expected vs actual
// shape) before anything is copied.
void loadFluxWeights(FluxTransformer& model, const FluxCheckpoint& ckpt);
void loadFluxWeights(FluxTransformer& model, const std::filesystem::path& path);

// How streamFluxTransformer treats each block once it is filled.
struct FluxStreamOptions {
  // Quantize each block's Linears (nn::quantizeLinears) right after it is filled.
  nn::QuantType quantize = nn::QuantType::None;
  // After each block and once at the end (stem and head): units done, units in all
  // (the blocks + 1). For the long load of a FLUX.1-dev checkpoint.
  std::function<void(int64_t done, int64_t total)> onProgress;
};

// Builds the model block by block from `ckpt`: every key and shape is checked
// against the model's layout first (the same LoadError as loadFluxWeights,
// nothing built), then each block is built on its device (options.device or
// options.blockDevice), filled with only its own tensors, quantized there when
// asked, and its file pages released, before the next block exists. Peak memory:
// the model as it ends up (quantized blocks) plus one block in options.dtype and
// the quantization workspace of one Linear. Bit for bit the same model as
// building, loadFluxWeights and quantizing afterwards. options.onBlockBuilt still
// runs, after the fill (and quantization).
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
