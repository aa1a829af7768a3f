#pragma once
// LoRA adapters as peft saves them (PeftModel.save_pretrained):
// a folder with adapter_config.json and adapter_model.safetensors, tensor keys
// "base_model.model.<module path>.lora_A.weight" [r, in] / ".lora_B.weight" [out, r],
// scale lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), per-module r and
// alpha from rank_pattern / alpha_pattern (peft's rule: a key matches a module
// path that ends in it after a '.').
//
// One function pair, read and write, over LoraModuleWeights in the model's own
// module paths ("model.layers.0.self_attn.q_proj"): the file format is lora/'s,
// a model only names its modules (models/llama/LlamaModuleNames.h).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "lora/LoraNetwork.h"

namespace strata::lora {

// Reads a peft LoRA folder. Each module's alpha is the one that gives peft's
// scale with Strata's alpha / r rule (rslora folded in). Throws IoError for a
// missing file or bad JSON, ConfigError naming the adapter_config.json key that
// Strata does not support (peft_type other than LORA, use_dora, fan_in_fan_out,
// a bias, modules_to_save), and LoadError naming the tensor key (with the file)
// that is no lora_A/lora_B weight, lacks its partner, or has a rank that
// disagrees with the config.
std::vector<LoraModuleWeights> readPeftAdapter(const std::filesystem::path& folder);

struct PeftWriteOptions {
  std::string baseModelNameOrPath;     // adapter_config.json's base_model_name_or_path
  std::string taskType = "CAUSAL_LM";  // task_type (the causal-LM family is the one that writes peft)
  double dropout = 0.0;                // lora_dropout
  at::ScalarType dtype = at::kFloat;   // of the written tensors
  // Every Linear path of the model. When given and the adapters cover only some
  // of the Linears whose names they share, target_modules is written as a regex
  // of the exact paths (peft would otherwise add adapters to the others).
  std::vector<std::string> modelLinearPaths;
};

// Writes `modules` into `folder` (created) as peft does: adapter_model.safetensors
// and adapter_config.json, both atomically. r / lora_alpha are the most common
// pair; modules that differ get rank_pattern / alpha_pattern entries.
void writePeftAdapter(const std::filesystem::path& folder, const std::vector<LoraModuleWeights>& modules,
                      const PeftWriteOptions& options = {});

// readPeftAdapter + LoraNetwork::fromWeights on `model`; a LoadError names the folder.
std::shared_ptr<LoraNetwork> loadPeftAdapter(torch::nn::Module& model, const std::filesystem::path& folder,
                                             double dropout = 0.0);

}  // namespace strata::lora
