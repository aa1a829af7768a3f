#pragma once
// A fixture folder of kind "causal_lm" loaded for the parity checks (CPU, label
// parity) and their CUDA version (label gpu): the transformers model folder
// (model/), the peft adapter (adapter/), the inputs and the reference outputs.
// Shapes, rank, alpha and tolerance come from the folder, never from this file.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "io/Safetensors.h"
#include "lora/LoraNetwork.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaForCausalLM.h"
#include "lora/PeftAdapter.h"
#include "parity/FluxFixture.h"

namespace strata::parity {

struct CausalLmFixture {
  std::shared_ptr<llama::LlamaForCausalLM> model;
  std::shared_ptr<lora::LoraNetwork> net;  // null until withAdapter()
  std::map<std::string, at::Tensor> inputs;
  std::map<std::string, at::Tensor> outputs;
  Tolerance tol;
  at::Device device = at::kCPU;

  CausalLmFixture(const std::filesystem::path& dir, const nlohmann::json& manifest, const at::Device& dev = at::kCPU)
      : device(dev) {
    llama::LlamaBuildOptions options;
    options.device = dev;
    model = llama::loadLlamaForCausalLM(dir / "model", options);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    inputs = io::loadSafetensors(dir / "inputs.safetensors");
    outputs = io::loadSafetensors(dir / "outputs.safetensors");
    tol = toleranceOf(manifest);
  }

  // The folder's peft adapter attached (train mode: the reference ran so, dropout 0).
  void withAdapter(const std::filesystem::path& dir) {
    net = lora::loadPeftAdapter(*model, dir / "adapter");
    net->train(true);
  }

  // As a Trainer calls the model: input ids and attention mask, no position ids.
  at::Tensor forward() {
    llama::LlamaInputs in;
    in.inputIds = inputs.at("input_ids").to(device);
    in.attentionMask = inputs.at("attention_mask").to(device);
    return model->forward(in);
  }
  at::Tensor loss(const at::Tensor& logits) { return llama::causalLmLoss(logits, inputs.at("labels").to(device)); }

  // logits [B, L, V] -> [N, V]: the rows where attention_mask is 1.
  at::Tensor where(const at::Tensor& logits) const {
    const auto keep = inputs.at("attention_mask").to(logits.device()).ne(0);
    return logits.index({keep});
  }
};

}  // namespace strata::parity
