// The FLUX transformer with its blocks' Linears quantized (nn/Quantize.h)
// against the float one, on every "flux_transformer" fixture: a report of the
// relative L2 error of the forward, and a bound it must stay under.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>

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

namespace {

// Weight-only int8 per row keeps ~0.4% per Linear (tests/nn); through the
// fixture's blocks that stays well under 3%. fp8 e4m3 has 3 mantissa bits.
constexpr double kInt8MaxRelL2 = 3e-2;
constexpr double kFloat8MaxRelL2 = 1e-1;

void checkQuantizedForward(const fs::path& dir, const nlohmann::json& manifest) {
  const auto cfg = flux::FluxConfig::fromDiffusersJson(manifest.at("config"));
  const auto inputs = parity::inputsOf(io::loadSafetensors(dir / "inputs.safetensors"));
  const auto ref = io::loadSafetensors(dir / "outputs.safetensors").at("output").to(at::kDouble);
  at::NoGradGuard noGrad;
  flux::FluxTransformer base(cfg);
  flux::loadFluxWeights(base, dir / "transformer.safetensors");
  const auto floatOut = base.forward(inputs).to(at::kDouble);
  std::vector<nn::QuantType> types = {nn::QuantType::Int8};
  if (compat::kHasFloat8) types.insert(types.end(), {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3});
  for (auto t : types) {
    flux::FluxTransformer model(cfg);
    flux::loadFluxWeights(model, dir / "transformer.safetensors");
    int64_t n = 0;
    for (auto& slot : model.blockList().blocks) n += nn::quantizeLinears(*slot.block, t);
    ASSERT_GT(n, 0);
    const auto out = model.forward(inputs).to(at::kDouble);
    const double vsFloat = (out - floatOut).norm().item<double>() / floatOut.norm().item<double>();
    const double vsRef = (out - ref).norm().item<double>() / ref.norm().item<double>();
    std::cout << "[parity]     " << nn::quantTypeName(t) << " base (" << n << " Linears): relative L2 " << vsFloat
              << " vs the float base, " << vsRef << " vs the reference" << std::endl;
    EXPECT_GT(vsFloat, 0.0) << nn::quantTypeName(t);
    EXPECT_LT(vsFloat, t == nn::QuantType::Int8 ? kInt8MaxRelL2 : kFloat8MaxRelL2) << nn::quantTypeName(t);
  }
}

}  // namespace

STRATA_PARITY_CHECK("flux_transformer", "quantized base forward vs float (int8 rel. L2 < 3e-2; fp8 < 1e-1)",
                    checkQuantizedForward);
