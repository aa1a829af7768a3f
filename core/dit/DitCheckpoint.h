#pragma once
// DiT weights on disk (FLUX.1, FLUX.2) and the one strict, streamed and
// quantizing loader. A checkpoint is a model's io::ComponentWeights (a diffusers
// folder or file, or one BFL file; ComfyUI's "model.diffusion_model." /
// "diffusion_model." wrapper is accepted) read in diffusers or BFL names (detected).
// Every key and shape is checked (io::checkStrict) before any tensor is copied or
// any block built, so a bad file never leaves a half-loaded model. The BFL rows come
// from the model's BflNames: fused q/k/v (and a FLUX.1 single block's linear1) load
// row slices, the final modulation's halves are swapped.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dit/BflNames.h"
#include "dit/DitLayers.h"
#include "dit/ModuleSpec.h"
#include "io/SafetensorsCheckpoint.h"
#include "nn/Quantize.h"

namespace strata::dit {

enum class WeightFormat { Diffusers, Bfl };
const char* toString(WeightFormat format);

class DitCheckpoint {
 public:
  // Reads the headers only (files are memory-mapped): strips a ComfyUI wrapper and
  // detects BFL names. `path` is what the user named (for messages).
  static DitCheckpoint open(io::ComponentWeights weights, const std::filesystem::path& path);

  WeightFormat format() const { return format_; }
  // Tensor name (wrapper stripped) -> shape.
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  bool contains(const std::string& name) const { return shapes_.count(name) > 0; }
  // CPU tensor in the file's dtype, over the mapping (no copy). Throws LoadError if absent.
  at::Tensor tensor(const std::string& name) const;
  // Once a tensor is copied out, its file pages stop counting as resident memory.
  void releasePages(const std::string& name) const;
  // The name as stored (with the wrapper).
  std::string fileKey(const std::string& name) const { return prefix_ + name; }
  // config.json next to the weights (diffusers folder), empty when there is none.
  const std::filesystem::path& configJsonPath() const { return weights_.configJson; }
  const std::filesystem::path& path() const { return path_; }
  const io::SafetensorsCheckpoint& weights() const { return *weights_.weights; }
  std::vector<std::filesystem::path> files() const { return weights_.weights->files(); }

 private:
  std::filesystem::path path_;
  io::ComponentWeights weights_;
  std::string prefix_;  // a ComfyUI wrapper every key carries, else ""
  WeightFormat format_ = WeightFormat::Diffusers;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// What the loader needs to know of a model: its names, and its label in messages
// ("" for FLUX.1: "<file> (BFL names): ..."; "FLUX.2 transformer, " for FLUX.2).
struct LoadTarget {
  const BflNames& names;
  std::string labelPrefix;
  std::string who;  // for loader bugs: "streamFluxTransformer"
};

// Copies every parameter of `model` from `ckpt`, converting to each parameter's
// dtype and device. Strict: LoadError listing every missing, unexpected and
// mis-shaped key (expected vs actual shape) before anything is copied.
void loadWeights(torch::nn::Module& model, const DitCheckpoint& ckpt, const LoadTarget& target);

// How streamModel treats each block once it is filled.
struct StreamOptions {
  // Quantize each block's Linears (nn::quantizeLinears) right after it is filled.
  nn::QuantType quantize = nn::QuantType::None;
  // After each block and once at the end (stem and head): units done, units in all (the blocks + 1).
  std::function<void(int64_t done, int64_t total)> onProgress;
};

// The model's shape and how to build it with given options (its constructor).
struct StreamedModel {
  UnitLayout layout;
  int64_t numLayers = 0;
  int64_t numSingleLayers = 0;
  std::function<bool(torch::nn::Module& block)> isDoubleBlock;
  std::function<std::shared_ptr<torch::nn::Module>(const BuildOptions&)> build;
};

// Builds the model block by block from `ckpt`: every key and shape is checked
// against the layout first (the same LoadError as loadWeights, nothing built), then
// each block is built on its device (options.device or options.blockDevice), filled
// with only its own tensors, quantized there when asked, and its file pages released,
// before the next block exists. Peak memory: the model as it ends up plus one block
// in options.dtype and the quantization workspace of one Linear. Bit for bit the same
// model as building, loadWeights and quantizing afterwards. options.onBlockBuilt
// still runs, after the fill (and quantization).
std::shared_ptr<torch::nn::Module> streamModel(const DitCheckpoint& ckpt, const StreamedModel& model,
                                               const LoadTarget& target, BuildOptions options,
                                               const StreamOptions& stream);

// streamModel for a model class built as Model(cfg, options) whose double blocks are
// DoubleBlock, over `layout` (its rows for cfg).
template <class Model, class DoubleBlock, class Config>
std::shared_ptr<Model> streamModelOf(const DitCheckpoint& ckpt, const Config& cfg, UnitLayout layout,
                                     const LoadTarget& target, BuildOptions options, const StreamOptions& stream) {
  StreamedModel m;
  m.layout = std::move(layout);
  m.numLayers = cfg.numLayers;
  m.numSingleLayers = cfg.numSingleLayers;
  m.isDoubleBlock = [](torch::nn::Module& block) { return dynamic_cast<DoubleBlock*>(&block) != nullptr; };
  m.build = [&cfg](const BuildOptions& o) { return std::make_shared<Model>(cfg, o); };
  return std::static_pointer_cast<Model>(streamModel(ckpt, m, target, std::move(options), stream));
}

// The model's weights in BFL naming (fused parts stacked on dim 0, the final
// modulation halves swapped), CPU tensors in the model's dtype. Throws strata::Error
// on a model with a quantized Linear (nn/QuantizedWrite.h), naming `writer`.
std::vector<std::pair<std::string, at::Tensor>> bflStateDict(torch::nn::Module& model, const BflNames& names,
                                                             const std::string& writer);
// The model's weights in diffusers naming (named_parameters), CPU tensors; the same guard.
std::vector<std::pair<std::string, at::Tensor>> diffusersStateDict(torch::nn::Module& model, const std::string& writer);

}  // namespace strata::dit
