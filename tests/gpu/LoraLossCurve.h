#pragma once
// The LoRA loss curve the quantized-base GPU tests compare against a bf16 base
// (test_quant_gpu.cpp, test_fp8_gpu.cpp): rank-16 LoRA on the default targets of
// a frozen FLUX transformer, AdamW at 1e-3 on one fixed batch, the loss of each
// step; and how far one curve strays from another.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "lora/LoraNetwork.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"

namespace strata::test::gpu {

// The curves' model and batch: FLUX.1-dev's width (3072, 24 heads, T5 4096) with 2 double
// and 4 single blocks; one 512 px micro-batch in bf16 with 512 text tokens, and a float
// target, on `device` (drawn after at::manual_seed(33)).
struct FluxDevWidthCase {
  flux::FluxConfig cfg;
  flux::FluxInputs in;
  at::Tensor target;
};
inline FluxDevWidthCase fluxDevWidthCase(const c10::Device& device) {
  FluxDevWidthCase c;
  c.cfg = flux::FluxConfig::fluxDev();
  c.cfg.numLayers = 2;
  c.cfg.numSingleLayers = 4;
  const int64_t side = 32, textTokens = 512;
  const auto bf16 = at::TensorOptions(device).dtype(at::kBFloat16);
  at::manual_seed(33);
  c.in.img = at::randn({1, side * side, c.cfg.inChannels}, bf16);
  c.in.txt = at::randn({1, textTokens, c.cfg.jointAttentionDim}, bf16);
  c.in.pooled = at::randn({1, c.cfg.pooledProjectionDim}, bf16);
  c.in.timestep = at::full({1}, 0.5, at::TensorOptions(device));
  c.in.guidance = at::ones({1}, at::TensorOptions(device));
  c.in.imgIds = flux::imageIds(2 * side, 2 * side, at::TensorOptions(device));
  c.in.txtIds = flux::textIds(textTokens, at::TensorOptions(device));
  c.target = at::randn({1, side * side, c.cfg.outChannels}, at::TensorOptions(device));
  return c;
}

// `steps` steps on `model` (its parameters frozen by the caller); the LoRA's
// initialisation is drawn after at::manual_seed(loraSeed), its weights in `loraDtype`.
// The network is detached again, so the model is the caller's base as it was.
inline std::vector<double> loraLossCurve(flux::FluxTransformer& model, const flux::FluxConfig& cfg,
                                         const flux::FluxInputs& in, const at::Tensor& target, uint64_t loraSeed,
                                         int steps = 30, at::ScalarType loraDtype = at::kFloat) {
  at::manual_seed(loraSeed);
  lora::LoraConfig lc;
  lc.rank = 16;
  lc.alpha = 16;
  lc.dtype = loraDtype;
  auto network = lora::LoraNetwork::create(model, lc, flux::FluxLoraRules(cfg));
  network->train(true);
  torch::optim::AdamW opt(network->parameters(), torch::optim::AdamWOptions(1e-3));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto loss = (model.forward(in).to(at::kFloat) - target).pow(2).mean();
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item<double>());
  }
  network->detach();
  return losses;
}

// |curve_i - ref_i| / ref_i over the steps both have: the largest and the mean.
struct CurveGap {
  double max = 0;
  double mean = 0;
};
inline CurveGap curveGap(const std::vector<double>& curve, const std::vector<double>& ref) {
  CurveGap g;
  const size_t n = std::min(curve.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    const double gap = std::abs(curve[i] - ref[i]) / ref[i];
    g.max = std::max(g.max, gap);
    g.mean += gap / static_cast<double>(n);
  }
  return g;
}

// "[tag] loss curve name: l1 l2 ..." on stdout, for the GPU logs.
inline void printLossCurve(const std::string& tag, const std::string& name, const std::vector<double>& curve) {
  std::cout << "[" << tag << "] loss curve " << name << ":";
  for (double v : curve) std::cout << " " << v;
  std::cout << std::endl;
}

}  // namespace strata::test::gpu
