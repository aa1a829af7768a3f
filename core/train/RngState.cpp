#include "train/RngState.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace strata::train {

namespace {
at::Generator defaultGeneratorOf(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }
}  // namespace

at::Generator makeCpuGenerator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

std::vector<std::pair<std::string, at::Tensor>> captureRngStates(at::Generator& trainer,
                                                                 const std::vector<c10::Device>& cudaDevices) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  {
    std::lock_guard<std::mutex> lock(trainer.mutex());
    out.emplace_back("rng.trainer", trainer.get_state().clone());
  }
  {
    auto cpu = defaultGeneratorOf(c10::Device(c10::kCPU));
    std::lock_guard<std::mutex> lock(cpu.mutex());
    out.emplace_back("rng.cpu", cpu.get_state().clone());
  }
  for (const auto& d : cudaDevices) {
    if (!d.is_cuda()) continue;
    auto g = defaultGeneratorOf(d);
    std::lock_guard<std::mutex> lock(g.mutex());
    out.emplace_back("rng." + d.str(), g.get_state().clone());
  }
  return out;
}

std::vector<std::string> restoreRngStates(at::Generator& trainer,
                                          const std::vector<std::pair<std::string, at::Tensor>>& states) {
  std::vector<std::string> restored;
  for (const auto& [name, state] : states) {
    const auto st = state.to(at::kCPU).contiguous();
    if (name == "rng.trainer") {
      std::lock_guard<std::mutex> lock(trainer.mutex());
      trainer.set_state(st);
    } else if (name == "rng.cpu") {
      auto g = defaultGeneratorOf(c10::Device(c10::kCPU));
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(st);
    } else if (name.rfind("rng.cuda", 0) == 0) {
      const c10::Device d(name.substr(4));
      if (!d.is_cuda() || !at::hasCUDA() || d.index() >= static_cast<int>(at::getNumGPUs())) continue;
      auto g = defaultGeneratorOf(d);
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(st);
    } else {
      continue;
    }
    restored.push_back(name);
  }
  return restored;
}

}  // namespace strata::train
