#pragma once
// A Llama-family causal LM (Llama, Mistral, Qwen2: models/llama) as a
// train::ModelFamily: the model from model.name_or_path (a transformers folder;
// with random_weights its config.json alone), the tokenizer from
// model.tokenizer_path or that folder, jsonl / synthetic datasets (LmDataset),
// the response-only causal-LM loss, text samples and the peft adapter folder.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "families/llama/LlamaPlanning.h"
#include "models/llama/LlamaForCausalLM.h"
#include "nn/Block.h"
#include "text/Tokenizer.h"
#include "train/ModelFamily.h"

namespace strata::families {

std::shared_ptr<const train::ModelFamily> makeLlamaFamily();

// The model's config.json (model.name_or_path): ConfigError naming the key when
// the path is empty, IoError / ConfigError naming the file otherwise.
llama::LlamaConfig llamaConfigOf(const config::ModelConfig& m);

// The planner's options of a run config for this family.
LlamaPlanOptions llamaPlanOptionsOf(const config::RunConfig& cfg);

struct GenerateOptions {
  int64_t maxNewTokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax); else softmax(logits / T), drawn from `seed`
  uint64_t seed = 42;
};
// Continues `promptIds` token by token (a full forward per token: no KV cache)
// until maxNewTokens or eos; returns the new ids. No gradients; `runner` null = local.
std::vector<int> generateTokens(llama::LlamaForCausalLM& model, nn::BlockRunner* runner, const c10::Device& device,
                                const std::vector<int>& promptIds, const GenerateOptions& options,
                                std::optional<int> eos);

}  // namespace strata::families
