#pragma once
// LoRA files in the three forms users expect (DESIGN §3), read into and written
// from the model's own (diffusers) module naming. Every name rule comes from
// models/flux/FluxNames.h.
//
//  - Diffusers/peft: "transformer.<module>.lora_A.weight" [r, in] / ".lora_B.weight"
//    [out, r]; keys without "transformer." (and peft's "base_model.model.") are
//    accepted. Alpha: ".alpha" tensors, else the "lora_adapter_metadata" header
//    entry (lora_alpha, alpha_pattern, use_rslora; keys with or without the
//    "transformer." prefix), else alpha = r. Written with alpha/r folded into
//    lora_B, and metadata saying lora_alpha = r, so loaders that read no alpha
//    and loaders that read the metadata both get the same result.
//  - kohya: "lora_unet_<BFL path, '.' -> '_'>.lora_down.weight" / ".lora_up.weight"
//    / ".alpha" (scale = alpha / rank of the tensor).
//  - ComfyUI: "diffusion_model.<BFL path>.lora_A.weight" / ".lora_B.weight" /
//    ".alpha" (lora_down / lora_up, "model.diffusion_model." and bare BFL paths read too).
//
// Fused BFL modules (double_blocks.N.{img,txt}_attn.qkv = q,k,v; single_blocks.N.
// linear1 = q,k,v,proj_mlp). Decision: Strata keeps one adapter per projection
// (the diffusers modules), so a fused LoRA is split on load, always exactly:
//  - if the columns of up used by each part's rows are disjoint (a block-diagonal
//    up, what Strata and kohya's split-qkv export write), part i gets down[cols_i]
//    and up[rows_i, cols_i], rank |cols_i|, alpha scaled so alpha/rank is kept;
//    parts whose rows are all zero get no adapter;
//  - otherwise each part gets the whole down (rank R) and its rows of up:
//    delta_i = up[rows_i] @ down, which is exactly that part of the fused delta.
// On export the per-projection adapters are fused back: if all parts share one
// down (the second case above, untouched), up rows are stacked over that down
// (rank R); otherwise downs are stacked and up is block-diagonal (rank = sum of
// ranks: three rank-r LoRAs give rank 3r, linear1's four give 4r), with zero rows
// for parts that have no adapter. Differing scales are folded into up then.
// norm_out.linear <-> final_layer.adaLN_modulation.1 swaps the halves of up's rows.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lora/LoraNetwork.h"
#include "models/flux/FluxConfig.h"

namespace strata::lora {

enum class LoraFileFormat { Diffusers, Kohya, Comfy };

const char* toString(LoraFileFormat format);  // "diffusers", "kohya", "comfy"

struct LoraLoadOptions {
  // Replaces every alpha the file gives or implies (before fused splits), e.g.
  // a reference manifest's alpha for a file without any.
  std::optional<double> alpha;
  double dropout = 0.0;  // of the adapters built by loadLoraNetwork
};

struct LoraFileContent {
  LoraFileFormat format = LoraFileFormat::Diffusers;  // of the first LoRA key
  std::vector<LoraModuleWeights> modules;             // diffusers module paths, model order
  std::map<std::string, std::string> metadata;        // the file's header metadata
};

// Converts a LoRA state dict to per-module weights of a FLUX model with config
// `cfg`. Throws strata::LoadError naming the key (and `sourceName`) for a key
// that is not a LoRA tensor or names no Linear of the model, a down without an
// up (or the reverse), or a tensor whose shape does not fit its module.
LoraFileContent convertLoraTensors(const std::map<std::string, at::Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata,
                                   const flux::FluxConfig& cfg, const LoraLoadOptions& options = {},
                                   const std::string& sourceName = "LoRA");
// Reads a .safetensors LoRA file (any of the three forms, detected per key).
LoraFileContent readLoraFile(const std::filesystem::path& path, const flux::FluxConfig& cfg,
                             const LoraLoadOptions& options = {});
// readLoraFile + LoraNetwork::fromWeights on `model` (a FluxTransformer of config `cfg`).
std::shared_ptr<LoraNetwork> loadLoraNetwork(torch::nn::Module& model, const flux::FluxConfig& cfg,
                                             const std::filesystem::path& path,
                                             const LoraLoadOptions& options = {});

struct LoraExportOptions {
  LoraFileFormat format = LoraFileFormat::Diffusers;
  at::ScalarType dtype = at::kFloat;  // of the written tensors
  std::string softwareVersion;        // Strata's version, e.g. "0.1.0" (the caller knows it)
  std::string baseModel;              // "black-forest-labs/FLUX.1-dev" or a checkpoint path
  std::string title;                  // modelspec.title and ss_output_name
  int64_t rank = 0;                   // nominal rank for ss_network_dim (0: most common adapter rank)
  double alpha = 0.0;                 // nominal alpha for ss_network_alpha (0: alpha of that rank)
  int64_t steps = 0;                  // ss_steps
  std::string runYaml;                // the run's YAML, stored as "strata_run_config"
  std::map<std::string, std::string> extraMetadata;  // written last (overrides)
};

// The tensors of `modules` in `format` (keys and shapes of DESIGN §3), in `dtype`.
// Throws strata::Error for a module with no BFL name (kohya, Comfy).
std::vector<std::pair<std::string, at::Tensor>> loraTensorsForExport(const std::vector<LoraModuleWeights>& modules,
                                                                     LoraFileFormat format,
                                                                     const flux::FluxConfig& cfg,
                                                                     at::ScalarType dtype = at::kFloat);
// Header metadata: software, ss_* and modelspec.* keys, the run YAML, and for
// the diffusers form lora_adapter_metadata (peft LoraConfig, alpha = r).
std::map<std::string, std::string> loraMetadataForExport(const std::vector<LoraModuleWeights>& modules,
                                                         const LoraExportOptions& options);
// Writes `network`'s adapters to `path` atomically. Refuses (strata::Error,
// naming the first such tensor) a LoRA with NaN or Inf values.
void writeLoraFile(const std::filesystem::path& path, const LoraNetwork& network, const flux::FluxConfig& cfg,
                   const LoraExportOptions& options);
void writeLoraFile(const std::filesystem::path& path, const std::vector<LoraModuleWeights>& modules,
                   const flux::FluxConfig& cfg, const LoraExportOptions& options);

}  // namespace strata::lora
