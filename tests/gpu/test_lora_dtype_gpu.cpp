// network.dtype on the card (label gpu; skips without CUDA): a LoRA trained in bfloat16
// (weights, gradients and AdamW moments, as peft trains on a bf16 model) follows the
// float32 LoRA's loss curve at FLUX.1-dev's width, on a bf16 base.
#include <gtest/gtest.h>

#include <iostream>

#include "common/TestSupport.h"
#include "gpu/LoraLossCurve.h"

using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

TEST(LoraDtypeGpu, BfloatLoraFollowsTheFloatLorasLossCurveAtFluxDevWidth) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  const c10::Device cuda(c10::kCUDA, 0);
  const auto [cfg, in, target] = fluxDevWidthCase(cuda);
  at::manual_seed(31);
  FluxTransformer model(cfg, FluxBuildOptions{cuda, at::kBFloat16});
  for (auto& p : model.parameters()) p.requires_grad_(false);

  const auto ref = loraLossCurve(model, cfg, in, target, 32, 30, at::kFloat);
  const auto curve = loraLossCurve(model, cfg, in, target, 32, 30, at::kBFloat16);
  printLossCurve("lora dtype gpu", "float32 LoRA", ref);
  printLossCurve("lora dtype gpu", "bfloat16 LoRA", curve);
  const CurveGap gap = curveGap(curve, ref);
  std::cout << "[lora dtype gpu] bfloat16 LoRA against float32 over 30 steps: max relative difference " << gap.max
            << ", mean " << gap.mean << "; first/last " << curve.front() << " / " << curve.back() << " (float32 "
            << ref.front() << " / " << ref.back() << ")" << std::endl;
  EXPECT_LT(ref.back(), 0.9 * ref.front()) << "the float32 LoRA does not learn";
  EXPECT_LT(curve.back(), 0.9 * curve.front()) << "the bfloat16 LoRA does not learn";
  // The quantized bases' bound (test_quant_gpu.cpp): a tenth of the loss, far above
  // bf16's step-to-step noise and far below the loss's fall over the run.
  EXPECT_LT(gap.max, 0.1);
}
