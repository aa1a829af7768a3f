#pragma once
// A tiny random FLUX (FluxConfig::tiny) and inputs for the LoRA tests.
#include <ATen/ATen.h>

#include <memory>

#include "lora/LoraNetwork.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"

namespace strata::lora::test {

struct TinyFlux {
  flux::FluxConfig cfg = flux::FluxConfig::tiny();
  flux::FluxLoraRules rules{cfg};  // FLUX's LoRA naming and default targets
  std::shared_ptr<flux::FluxTransformer> model;
  flux::FluxInputs inputs;

  explicit TinyFlux(int64_t batch = 2, uint64_t seed = 7) {
    at::manual_seed(seed);
    model = std::make_shared<flux::FluxTransformer>(cfg);  // LoraNetwork::create freezes it
    const int64_t h = 4, w = 4, nTxt = 6;
    inputs.img = at::randn({batch, h * w / 4, cfg.inChannels});
    inputs.txt = at::randn({batch, nTxt, cfg.jointAttentionDim});
    inputs.pooled = at::randn({batch, cfg.pooledProjectionDim});
    inputs.timestep = at::full({batch}, 0.4);
    inputs.guidance = at::full({batch}, 1.0);
    inputs.imgIds = flux::imageIds(h, w);
    inputs.txtIds = flux::textIds(nTxt);
  }

  at::Tensor forward() {
    at::NoGradGuard noGrad;
    return model->forward(inputs);
  }
};

// Gives every adapter a random up (a fresh network's up is zero, so its delta is 0).
inline void randomizeUps(LoraNetwork& net, double stddev = 0.05) {
  at::NoGradGuard noGrad;
  for (const auto& a : net.adapters()) a->up.copy_(at::randn(a->up.sizes()) * stddev);
}

}  // namespace strata::lora::test
