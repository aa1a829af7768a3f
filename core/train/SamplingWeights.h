#pragma once
// While a sample is drawn: the LoRA network in eval mode (no dropout) and, with
// EMA on, the EMA weights swapped in; both put back when this goes out of scope,
// whatever the sampler throws. Every family's sampler takes one.
#include <memory>

#include "lora/LoraNetwork.h"
#include "train/Ema.h"

namespace strata::train {

class SamplingWeights {
 public:
  SamplingWeights(lora::LoraNetwork& network, Ema* ema) : network_(network) {
    network_.train(false);
    if (ema) swap_ = std::make_unique<Ema::SwapGuard>(*ema);
  }
  ~SamplingWeights() {
    swap_.reset();  // the live weights back first, then training mode
    network_.train(true);
  }
  SamplingWeights(const SamplingWeights&) = delete;
  SamplingWeights& operator=(const SamplingWeights&) = delete;

 private:
  lora::LoraNetwork& network_;
  std::unique_ptr<Ema::SwapGuard> swap_;
};

}  // namespace strata::train
