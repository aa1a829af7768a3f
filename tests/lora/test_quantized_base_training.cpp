// A 30-step LoRA run on an int8 base stays close to the same run on the float base
// (docs/quantization.md), on every flux_transformer fixture: the same weights, seed,
// batch and target; the two loss curves are compared step by step.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/ReferenceFixtures.h"
#include "io/Safetensors.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Quantize.h"
#include "parity/FluxFixture.h"

using namespace strata;
using namespace strata::flux;

namespace {

constexpr int kSteps = 30;

struct Curve {
  std::vector<double> losses;
  at::Tensor firstOut;  // the step-0 output (the LoRA adds nothing yet)
};

Curve train(const std::filesystem::path& dir, const FluxConfig& cfg, const FluxInputs& in, const at::Tensor& target,
            nn::QuantType t) {
  FluxTransformer model(cfg);
  loadFluxWeights(model, dir / "transformer.safetensors");
  if (t != nn::QuantType::None)
    for (auto& slot : model.blockList().blocks) nn::quantizeLinears(*slot.block, t);
  for (auto& p : model.parameters()) p.requires_grad_(false);
  at::manual_seed(41);  // the same LoRA init for both runs
  lora::LoraConfig lc;
  lc.rank = 4;
  lc.alpha = 4;
  auto network = lora::LoraNetwork::create(model, lc, FluxLoraRules(cfg));
  network->train(true);
  torch::optim::AdamW opt(network->parameters(), torch::optim::AdamWOptions(1e-2));
  Curve c;
  for (int step = 0; step < kSteps; ++step) {
    const auto out = model.forward(in);
    if (step == 0) c.firstOut = out.detach();
    const auto loss = (out - target).pow(2).mean();
    loss.backward();
    opt.step();
    opt.zero_grad();
    c.losses.push_back(loss.item<double>());
  }
  network->detach();
  return c;
}

}  // namespace

TEST(QuantizedBaseTraining, Int8LossCurveStaysCloseToTheFloatOneOnEveryFluxFixture) {
  const auto fixtures = test::fixturesOfKind("flux_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = FluxConfig::fromDiffusersJson(manifest.at("config"));
    const auto in = parity::inputsOf(io::loadSafetensors(dir / "inputs.safetensors"));
    at::manual_seed(40);
    const auto target = at::randn_like(io::loadSafetensors(dir / "outputs.safetensors").at("output"));
    const auto ref = train(dir, cfg, in, target, nn::QuantType::None);
    const auto q = train(dir, cfg, in, target, nn::QuantType::Int8);
    // The bound. At step 0 the LoRA adds nothing, so the losses differ only by the
    // base's forward error d = out_q - out_f: with the float residual e = out_f - target,
    // |L_q - L_f| / L_f <= 2 rho + rho^2, rho = |d| / |e| (Cauchy-Schwarz). Training
    // then follows each base's own gradient, which moves by the same relative error,
    // so the gap may drift; allowed: 3x the step-0 bound. That scales with the
    // quantization error itself (fair to int8, and a bug that changes the gradient or
    // the forward by more than int8's rounding fails it), and it is checked against
    // the loss's own fall, so a run that does not train cannot pass.
    const double rho =
        (q.firstOut - ref.firstOut).norm().item<double>() / (ref.firstOut - target).norm().item<double>();
    const double step0Bound = 2 * rho + rho * rho;
    double maxGap = 0, sumGap = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double gap = std::abs(q.losses[i] - ref.losses[i]) / ref.losses[i];
      maxGap = std::max(maxGap, gap);
      sumGap += gap;
    }
    const double fall = (ref.losses.front() - ref.losses.back()) / ref.losses.front();
    std::printf(
        "[quant train] %s: int8 vs float over %d steps: max relative loss difference %.3g, mean %.3g; "
        "step-0 bound %.3g (rho %.3g); loss %.5g -> %.5g (float %.5g -> %.5g, fell %.1f%%)\n",
        dir.filename().c_str(), kSteps, maxGap, sumGap / kSteps, step0Bound, rho, q.losses.front(), q.losses.back(),
        ref.losses.front(), ref.losses.back(), 100 * fall);
    EXPECT_GT(rho, 0.0) << "the int8 base computes exactly the float base: not quantized";
    EXPECT_LE(std::abs(q.losses[0] - ref.losses[0]) / ref.losses[0], step0Bound * (1 + 1e-6) + 1e-9);
    EXPECT_LT(maxGap, 3 * step0Bound);
    EXPECT_GT(fall, 0.1) << "the float run does not train: the comparison says nothing";
    EXPECT_LT(maxGap, 0.1 * fall) << "the int8 gap is not small against what training changes";
  }
}
