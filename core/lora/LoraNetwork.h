#pragma once
// The set of LoRA adapters of one model: which Linear layers get one, attach /
// detach / merge, the multiplier, parameters for the optimizer, the state dict in
// diffusers/peft naming and the placement attachments. Model-agnostic: it sees the
// model only through named_modules() and nn::Linear.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lora/LoraAdapter.h"
#include "lora/LoraTargets.h"
#include "nn/LoraNameRules.h"
#include "placement/Attachment.h"

namespace strata::lora {

struct LoraConfig {
  int64_t rank = 16;
  double alpha = 16.0;                      // scale = alpha / rank
  double dropout = 0.0;                     // on the adapter input, training only
  std::vector<std::string> targetModules;   // LoraTargets patterns; empty = the family's defaultTargets()
  std::vector<std::string> excludeModules;  // LoraTargets patterns
  at::ScalarType dtype = at::kFloat;        // the weights' (float32 or bfloat16)
};

// One adapter's weights in the model's own module naming (diffusers for FLUX):
// what a file loader produces and an exporter consumes.
struct LoraModuleWeights {
  std::string modulePath;  // "transformer_blocks.0.attn.to_q"
  at::Tensor down;         // lora_A [r, in]
  at::Tensor up;           // lora_B [out, r]
  double alpha = 0.0;      // scale = alpha / r
};

class LoraNetwork {
 public:
  // New adapters (down kaiming-uniform, up zeros) on every nn::Linear of `model`
  // that the targets match, attached; every parameter `model` had before is frozen
  // (requires_grad false). Empty targets take the family's default (`rules`);
  // without rules they must be given. Throws strata::ConfigError when nothing matches.
  static std::shared_ptr<LoraNetwork> create(torch::nn::Module& model, const LoraConfig& config,
                                             const nn::LoraNameRules& rules);
  static std::shared_ptr<LoraNetwork> create(torch::nn::Module& model, const LoraConfig& config);
  // Adapters with the given weights, attached. Throws strata::LoadError naming a
  // module path that is not an nn::Linear of the model, a duplicate, or a
  // weight whose shape does not fit its Linear.
  static std::shared_ptr<LoraNetwork> fromWeights(torch::nn::Module& model,
                                                  const std::vector<LoraModuleWeights>& weights, double dropout = 0.0);
  ~LoraNetwork();
  LoraNetwork(const LoraNetwork&) = delete;
  LoraNetwork& operator=(const LoraNetwork&) = delete;

  // Adds / removes the adapters to / from their hosts' forward. Idempotent.
  void attach();
  void detach();
  bool attached() const { return attached_; }

  // Folds scale * multiplier * up @ down into each host weight (in the weight's
  // dtype) and takes the adapters out of the forward, for sampling without the
  // adapter cost; unmerge subtracts the same amount and re-attaches. Exact up
  // to the rounding of the weight dtype. Throws strata::Error with a per-sample
  // multiplier (it cannot be folded into one weight).
  void merge();
  void unmerge();
  bool merged() const { return merged_; }

  // The network-level multiplier (default 1). A per-sample one is [B], kept as
  // given (a CPU tensor is fine) and moved to each adapter's output device on use.
  void setMultiplier(double value);
  void setMultiplier(const at::Tensor& perSample);
  const LoraMultiplier& multiplier() const { return *multiplier_; }

  // Dropout on (training) or off.
  void train(bool on = true);

  // down, up of every adapter, in adapter order: for the optimizer.
  std::vector<at::Tensor> parameters() const;
  int64_t numParameters() const;
  // In the model's named_modules() order.
  const std::vector<std::shared_ptr<LoraAdapter>>& adapters() const { return adapters_; }
  // The adapter on `modulePath`, or null.
  std::shared_ptr<LoraAdapter> adapter(const std::string& modulePath) const;

  // "<prefix><module>.lora_A.weight" / ".lora_B.weight" -> the live parameters
  // (unscaled: scale = alpha / rank is not folded in), in adapter order.
  std::vector<std::pair<std::string, at::Tensor>> stateDict(const std::string& prefix) const;
  // Copies values into the adapters. Throws strata::LoadError listing missing,
  // unexpected and mis-shaped keys; nothing is copied then.
  void loadStateDict(const std::map<std::string, at::Tensor>& tensors, const std::string& prefix);
  // Detached float32 copies of every adapter's weights, with its alpha.
  std::vector<LoraModuleWeights> moduleWeights() const;

  // One placement attachment per adapter (kind LoraAdapter, hostPath = module path).
  std::vector<std::shared_ptr<placement::Attachment>> attachments() const;

 private:
  LoraNetwork() = default;
  std::vector<std::shared_ptr<LoraAdapter>> adapters_;
  std::shared_ptr<LoraMultiplier> multiplier_ = std::make_shared<LoraMultiplier>();
  bool attached_ = false;
  bool merged_ = false;
  double mergedMultiplier_ = 1.0;
};

// The inverse of LoraNetwork::stateDict, without a model (a run's checkpoint):
// every "<prefix><module>.lora_A.weight" / ".lora_B.weight" pair as float32
// module weights with `alpha`, sorted by module path. Throws strata::LoadError
// naming `sourceName` and the key for a key without the prefix or a LoRA suffix,
// a module with only one of the two, or a pair whose shapes do not pair.
std::vector<LoraModuleWeights> moduleWeightsFromStateDict(const std::map<std::string, at::Tensor>& tensors,
                                                          const std::string& prefix, double alpha,
                                                          const std::string& sourceName);

}  // namespace strata::lora
