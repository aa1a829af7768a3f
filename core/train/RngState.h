#pragma once
// Every random state a run depends on, for checkpoints: the trainer's own CPU
// generator (noise, timesteps, caption dropout, data order), the global CPU
// generator (LoRA dropout) and each used CUDA device's generator.
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

namespace strata::train {

// Named uint8 state tensors ("rng.trainer", "rng.cpu", "rng.cuda:1").
std::vector<std::pair<std::string, at::Tensor>> captureRngStates(at::Generator& trainer,
                                                                 const std::vector<c10::Device>& cudaDevices);

// Restores the states captureRngStates wrote; a state it does not find is left
// as it is (a checkpoint from a run on other devices). Returns the names restored.
std::vector<std::string> restoreRngStates(at::Generator& trainer,
                                          const std::vector<std::pair<std::string, at::Tensor>>& states);

// A fresh CPU generator seeded with `seed`.
at::Generator makeCpuGenerator(uint64_t seed);

}  // namespace strata::train
