#pragma once
// AutoencoderKL weights on disk, and the one strict loader. A checkpoint is a
// diffusers VAE folder (config.json + diffusion_pytorch_model.safetensors), a
// pipeline folder holding vae/, or one safetensors file in diffusers, legacy
// diffusers or ldm names (BFL's ae.safetensors). In a file that holds more than
// the VAE (ComfyUI / SD full checkpoints) only the keys under
// "first_stage_model." (or "vae.") are read. Loading verifies every key and shape
// before any tensor is copied, so a bad file never leaves a half-loaded model.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/vae/VaeConfig.h"
#include "models/vae/VaeNames.h"

namespace strata::io {
class SafetensorsCheckpoint;
}

namespace strata::vae {

class AutoencoderKL;
struct VaeBuildOptions;

class VaeCheckpoint {
 public:
  // Reads the header only (the file is memory-mapped). Throws IoError / LoadError.
  static VaeCheckpoint open(const std::filesystem::path& path);

  VaeWeightFormat format() const { return format_; }
  // Tensor name as stored (component prefix stripped) -> shape.
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }
  // CPU tensor in the file's dtype, over the mapping. Throws LoadError if absent.
  at::Tensor tensor(const std::string& name) const;
  const std::filesystem::path& path() const;                                   // the safetensors file
  const io::SafetensorsCheckpoint& files() const { return *file_; }            // the whole file, every component
  const std::string& prefix() const { return prefix_; }                        // "first_stage_model." or ""
  const std::filesystem::path& configJsonPath() const { return configJson_; }  // empty: none

  // config.json when the folder has one, else detected from the shapes with
  // `hints` for what shapes cannot tell.
  VaeConfig config(const VaeHints& hints = {}) const;

 private:
  std::shared_ptr<io::SafetensorsCheckpoint> file_;
  std::filesystem::path configJson_;
  std::string prefix_;
  VaeWeightFormat format_ = VaeWeightFormat::Diffusers;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// Copies every parameter of `model` (and a FLUX.2 VAE's bn.running_mean /
// running_var) from `ckpt`, converting to each tensor's dtype and device. Strict:
// throws LoadError naming the file and listing every missing, unexpected and
// mis-shaped key (in the file's naming) before anything is copied; only a FLUX.2
// VAE's bn.num_batches_tracked may be there unread. In ldm files the attention
// projections may be [C, C, 1, 1] or [C, C].
void loadVaeWeights(AutoencoderKL& model, const VaeCheckpoint& ckpt);
void loadVaeWeights(AutoencoderKL& model, const std::filesystem::path& path);

// Config from the checkpoint (VaeCheckpoint::config), model built with `options`
// (dtype through vaeComputeDtype) and loaded.
std::shared_ptr<AutoencoderKL> loadAutoencoderKL(const std::filesystem::path& path, const VaeBuildOptions& options,
                                                 const VaeHints& hints = {});

// The model's weights named as `format` names them (ldm: attention projections
// as [C, C, 1, 1]; a FLUX.2 VAE's batch-norm statistics too, float32), CPU
// tensors in the model's dtype, sorted by name.
std::vector<std::pair<std::string, at::Tensor>> vaeStateDict(AutoencoderKL& model,
                                                             VaeWeightFormat format = VaeWeightFormat::Diffusers);

}  // namespace strata::vae
