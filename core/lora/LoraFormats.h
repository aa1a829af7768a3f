#pragma once
// LoRA files in the forms users expect (docs/design.md §3), read into and written from a
// model's own module naming. The family's naming comes in through
// nn::LoraNameRules (FLUX: flux::FluxLoraRules); everything here is the same for
// every family:
//
//  - Diffusers/peft: "<stem>.lora_A.weight" [r, in] / ".lora_B.weight" [out, r].
//    Alpha: ".alpha" tensors, else the "lora_adapter_metadata" header entry
//    (lora_alpha, alpha_pattern, use_rslora; keys with or without the family's
//    peftMetadataPrefix), else alpha = r. Written with alpha/r folded into
//    lora_B, and metadata saying lora_alpha = r, so loaders that read no alpha
//    and loaders that read the metadata both get the same result.
//  - kohya: "<stem>.lora_down.weight" / ".lora_up.weight" / ".alpha" (scale =
//    alpha / rank of the tensor).
//  - ComfyUI: "<stem>.lora_A.weight" / ".lora_B.weight" / ".alpha" (lora_down /
//    lora_up read too).
// A family may write a form besides diffusers with alpha/r folded into lora_B and
// no ".alpha" (nn::LoraNameRules::foldsAlphaInto: FLUX.2's ComfyUI form).
// ".alpha" tensors are written in float32 whatever the export dtype (bf16 would
// round an alpha of 2.1 to 2.09375).
//
// Fused modules (one stem holding several of the model's modules, e.g. FLUX's
// BFL qkv). Decision: Strata keeps one adapter per model module, so a fused LoRA
// is split on load, always exactly:
//  - if the columns of up used by each part's rows are disjoint (a block-diagonal
//    up, what Strata and kohya's split-qkv export write), part i gets down[cols_i]
//    and up[rows_i, cols_i], rank |cols_i|, alpha scaled so alpha/rank is kept;
//    parts whose rows are all zero get no adapter;
//  - otherwise each part gets the whole down (rank R) and its rows of up:
//    delta_i = up[rows_i] @ down, which is exactly that part of the fused delta.
// On export the per-module adapters are fused back: if all parts share one down
// (the second case above, untouched), up rows are stacked over that down (rank
// R); otherwise downs are stacked and up is block-diagonal (rank = sum of ranks:
// three rank-r LoRAs give rank 3r, FLUX's linear1's four give 4r), with zero rows
// for parts that have no adapter. Differing scales are folded into up then.
// A slot with swapHalves (FLUX's norm_out.linear) swaps the halves of up's rows.
#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/Version.h"
#include "lora/LoraNetwork.h"
#include "nn/LoraNameRules.h"

namespace strata::lora {

using LoraFileFormat = nn::LoraFileFormat;
using nn::toString;  // "diffusers", "kohya", "comfy"

struct LoraLoadOptions {
  // Replaces every alpha the file gives or implies (before fused splits), e.g.
  // a reference manifest's alpha for a file without any.
  std::optional<double> alpha;
  double dropout = 0.0;  // of the adapters built by loadLoraNetwork
};

struct LoraFileContent {
  LoraFileFormat format = LoraFileFormat::Diffusers;  // of the first LoRA key
  std::vector<LoraModuleWeights> modules;             // the model's module paths, model order
  std::map<std::string, std::string> metadata;        // the file's header metadata
};

// Converts a LoRA state dict to per-module weights of the model `rules` name.
// Throws strata::LoadError naming the key (and `sourceName`) for a key that is
// not a LoRA tensor, is in none of the family's forms or names no Linear of the
// model, a down without an up (or the reverse), or a tensor whose shape does not
// fit its module.
LoraFileContent convertLoraTensors(const std::map<std::string, at::Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata, const nn::LoraNameRules& rules,
                                   const LoraLoadOptions& options = {}, const std::string& sourceName = "LoRA");
// Reads a .safetensors LoRA file (any of the family's forms, detected per key).
LoraFileContent readLoraFile(const std::filesystem::path& path, const nn::LoraNameRules& rules,
                             const LoraLoadOptions& options = {});
// readLoraFile + LoraNetwork::fromWeights on `model` (a model of the family and config `rules` describe).
std::shared_ptr<LoraNetwork> loadLoraNetwork(torch::nn::Module& model, const nn::LoraNameRules& rules,
                                             const std::filesystem::path& path, const LoraLoadOptions& options = {});

struct LoraExportOptions {
  LoraFileFormat format = LoraFileFormat::Diffusers;
  at::ScalarType dtype = at::kFloat;                 // of the written tensors
  std::string softwareVersion = kVersion;            // written as the file's "software" entry
  std::string baseModel;                             // "black-forest-labs/FLUX.1-dev" or a checkpoint path
  std::string title;                                 // modelspec.title and ss_output_name
  int64_t rank = 0;                                  // nominal rank for ss_network_dim (0: most common adapter rank)
  double alpha = 0.0;                                // nominal alpha for ss_network_alpha (0: alpha of that rank)
  int64_t steps = 0;                                 // ss_steps
  std::string runYaml;                               // the run's YAML, stored as "strata_run_config"
  std::map<std::string, std::string> extraMetadata;  // written last (overrides)
};

// The tensors of `modules` in `format` (keys and shapes of docs/design.md §3), in `dtype`
// (".alpha" in float32). Throws strata::Error when the family has no such form,
// or for a module that has no name in it or whose rows do not fit its slot.
std::vector<std::pair<std::string, at::Tensor>> loraTensorsForExport(const std::vector<LoraModuleWeights>& modules,
                                                                     LoraFileFormat format,
                                                                     const nn::LoraNameRules& rules,
                                                                     at::ScalarType dtype = at::kFloat);
// Header metadata: software, ss_* and modelspec.* keys, the family's own keys,
// the run YAML, and for the diffusers form lora_adapter_metadata (peft
// LoraConfig, alpha = r).
std::map<std::string, std::string> loraMetadataForExport(const std::vector<LoraModuleWeights>& modules,
                                                         const nn::LoraNameRules& rules,
                                                         const LoraExportOptions& options);
// Writes `network`'s adapters to `path` atomically. Refuses (strata::Error,
// naming the first such tensor) a LoRA with NaN or Inf values.
void writeLoraFile(const std::filesystem::path& path, const LoraNetwork& network, const nn::LoraNameRules& rules,
                   const LoraExportOptions& options);
void writeLoraFile(const std::filesystem::path& path, const std::vector<LoraModuleWeights>& modules,
                   const nn::LoraNameRules& rules, const LoraExportOptions& options);

}  // namespace strata::lora
