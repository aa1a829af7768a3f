// The FLUX transformer with its blocks' Linears quantized (nn/Quantize.h)
// against the float one, on every "flux_transformer" fixture: a report of the
// relative L2 error of the forward, and a bound it must stay under.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxConfig.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Quantize.h"
#include "parity/FluxFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;

using strata::test::relL2;

namespace {

// Weight-only int8 per row keeps ~0.4% per Linear (tests/nn); through the
// fixture's blocks that stays well under 3%, in float32 and in bf16 (against the
// bf16 base). fp8 e4m3 has 3 mantissa bits.
constexpr double kInt8MaxRelL2 = 3e-2;
constexpr double kFloat8MaxRelL2 = 1e-1;

// The model of the fixture in `dtype`, its blocks quantized to `t` (None: not).
at::Tensor forwardOf(const fs::path& dir, const flux::FluxConfig& cfg, const flux::FluxInputs& inputs,
                     at::ScalarType dtype, nn::QuantType t, int64_t* quantized) {
  flux::FluxTransformer model(cfg, {at::kCPU, dtype});
  flux::loadFluxWeights(model, dir / "transformer.safetensors");
  *quantized = 0;
  if (t != nn::QuantType::None)
    for (auto& slot : model.blockList().blocks) *quantized += nn::quantizeLinears(*slot.block, t);
  return model.forward(inputs).to(at::kDouble);
}

void checkQuantizedForward(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  const auto inputs = parity::inputsOf(io::loadSafetensors(dir / "inputs.safetensors"));
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("output").to(at::kDouble);
  at::NoGradGuard noGrad;
  int64_t n = 0;
  const auto floatOut = forwardOf(dir, cfg, inputs, at::kFloat, nn::QuantType::None, &n);
  // The bf16 base: what a quantized bf16 run is compared with on a card.
  const auto bf16Out = forwardOf(dir, cfg, inputs, at::kBFloat16, nn::QuantType::None, &n);
  std::cout << "[parity]     bf16 base: relative L2 " << relL2(bf16Out, floatOut) << " vs the float base" << std::endl;
  std::vector<nn::QuantType> types = {nn::QuantType::Int8};
  if (compat::kHasFloat8) types.insert(types.end(), {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3});
  for (auto t : types) {
    const auto out = forwardOf(dir, cfg, inputs, at::kFloat, t, &n);
    ASSERT_GT(n, 0);
    const double vsFloat = relL2(out, floatOut);
    const double vsRef = relL2(out, ref);
    const double vsBf16 = relL2(forwardOf(dir, cfg, inputs, at::kBFloat16, t, &n), bf16Out);
    std::cout << "[parity]     " << nn::quantTypeName(t) << " base (" << n << " Linears): relative L2 " << vsFloat
              << " vs the float base, " << vsRef << " vs the reference; in bf16 " << vsBf16 << " vs the bf16 base"
              << std::endl;
    EXPECT_GT(vsFloat, 0.0) << nn::quantTypeName(t);
    EXPECT_LT(vsFloat, t == nn::QuantType::Int8 ? kInt8MaxRelL2 : kFloat8MaxRelL2) << nn::quantTypeName(t);
    EXPECT_LT(vsBf16, t == nn::QuantType::Int8 ? kInt8MaxRelL2 : kFloat8MaxRelL2) << nn::quantTypeName(t) << " bf16";
  }
  // The fp8 matmul (model.fp8_matmul) runs on CUDA sm_89+ only: the same table for it
  // comes from the gpu test Fp8Gpu.EveryFluxFixtureForwardAgainstBf16.
  std::cout << "[parity]     fp8 matmul: CUDA only (gpu test Fp8Gpu.EveryFluxFixtureForwardAgainstBf16)" << std::endl;
}

}  // namespace

STRATA_PARITY_CHECK("flux_transformer", "quantized base forward vs float (int8 rel. L2 < 3e-2; fp8 < 1e-1)",
                    checkQuantizedForward);
