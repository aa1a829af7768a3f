#pragma once
// AdamW state to and from named tensors, for checkpoints. Keys follow the
// parameter paths: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step"; an
// adamw8bit state (train/AdamW8bit.h) writes "<param>.exp_avg.blockwise8" and
// "...blockwise8_absmax" (and the same for exp_avg_sq) in place of the float moments.
// Either form loads into either optimizer (quantized or dequantized on the way).
#include <torch/optim/adamw.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::train {

using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

// Every parameter's state, also of those no step has touched yet (zero moments,
// step 0: what AdamW would start them from), so a checkpoint is always whole.
std::vector<std::pair<std::string, at::Tensor>> saveAdamWState(torch::optim::AdamW& optimizer,
                                                               const NamedParams& params);

// Restores the state of every parameter found in `tensors`, on the parameter's
// device, or in pinned host memory for a CUDA parameter with `momentsInHostMemory`
// (train.offload_optimizer_state: the card never holds the whole state). Throws
// LoadError naming a parameter whose state is missing or mis-shaped (a checkpoint of
// another network), listing all of them.
void loadAdamWState(torch::optim::AdamW& optimizer, const NamedParams& params,
                    const std::map<std::string, at::Tensor>& tensors, bool momentsInHostMemory = false);

void setLearningRate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace strata::train
