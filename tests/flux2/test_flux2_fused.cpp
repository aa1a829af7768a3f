// FLUX.2 on nn::Linear's fused LoRA paths (docs/speed.md): the q/k/v of both streams of
// every double block and the stem's three shared-modulation Linears (they read the same
// silu(temb)) take one LoRA down matmul each (nn::forwardSiblings). With a LoRA on every
// Linear, the fused node runs exactly there, and the loss and every LoRA gradient equal
// those with the fused paths off (STRATA_FUSED_PATHS=0), on tiny configs and on every
// flux2_transformer fixture. FLUX.2's MLP is SwiGLU, so Linear::forwardGelu has no place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/ReferenceFixtures.h"
#include "common/FusedPaths.h"
#include "common/LoraTraining.h"
#include "common/TestSupport.h"
#include "flux2/Flux2TestSupport.h"
#include "io/Safetensors.h"
#include "lora/LoraNetwork.h"
#include "models/flux2/Flux2Checkpoint.h"
#include "models/flux2/Flux2LoraRules.h"
#include "models/flux2/Flux2Transformer.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"
#include "parity/Flux2Fixture.h"

using namespace strata;
using flux2::Flux2Config;

using strata::test::backwardThrough;
using strata::test::FusedPathsAs;
using strata::test::LoraTraining;
using strata::test::relL2;

namespace {

// The fused LoRA paths' relative error bound against the unfused ones: float32 sums in
// another order (one [M, sum r] matmul instead of one per adapter).
constexpr double kFusedRelTol = 2e-5;

// A rank-4 LoRA on every Linear of `model`, its ups random (a fresh up is zero: no delta,
// and no gradient reaches the downs).
std::shared_ptr<lora::LoraNetwork> loraOnEveryLinear(flux2::Flux2Transformer& model, const Flux2Config& cfg) {
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  lora::LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.targetModules = {"re:.*"};
  auto net = lora::LoraNetwork::create(model, c, flux2::Flux2LoraRules(cfg));
  at::NoGradGuard noGrad;
  for (const auto& a : net->adapters()) a->up.copy_(at::randn(a->up.sizes()) * 0.05);
  return net;
}

// One forward / backward of the mean squared error to `target`.
LoraTraining train(flux2::Flux2Transformer& model, const flux2::Flux2Inputs& in, const at::Tensor& target,
                   lora::LoraNetwork& net) {
  return backwardThrough((model.forward(in).to(at::kFloat) - target).pow(2).mean(), net);
}

// The fused paths against the unfused ones on `model` with `net`: the fused node runs once
// per double-block stream and once in the stem (none without the fused paths), and the
// loss and every LoRA gradient (all non-zero) agree within kFusedRelTol.
void expectFusedEqualsUnfused(flux2::Flux2Transformer& model, const flux2::Flux2Inputs& in, lora::LoraNetwork& net,
                              const std::string& what) {
  at::manual_seed(13);
  const at::Tensor target = [&] {
    at::NoGradGuard g;
    return at::randn_like(model.forward(in).to(at::kFloat));
  }();
  LoraTraining fused, plain;
  {
    FusedPathsAs on(true);
    fused = train(model, in, target, net);
  }
  {
    FusedPathsAs off(false);
    plain = train(model, in, target, net);
  }
  const int64_t doubleBlocks = model.config().numLayers;
  EXPECT_EQ(fused.fusedNodes, 2 * doubleBlocks + 1) << what << ": img and txt q/k/v per double block, the stem's mods";
  EXPECT_EQ(plain.fusedNodes, 0) << what << ": STRATA_FUSED_PATHS=0 still fused";
  EXPECT_LE(std::abs(fused.loss - plain.loss) / plain.loss, kFusedRelTol) << what << ": loss";
  ASSERT_EQ(fused.grads.size(), plain.grads.size());
  double worst = 0;
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    const double err = relL2(fused.grads[i], plain.grads[i]);
    worst = std::max(worst, err);
    EXPECT_LE(err, kFusedRelTol) << what << ": " << net.adapters()[i / 2]->hostPath() << (i % 2 ? " up" : " down");
    EXPECT_GT(plain.grads[i].abs().sum().item<double>(), 0)
        << what << ": " << net.adapters()[i / 2]->hostPath() << " has no gradient, the check says nothing";
  }
  std::printf(
      "[flux2 fused] %s: %zu adapters, %d fused nodes, loss %.8g fused / %.8g unfused, worst LoRA "
      "gradient rel L2 %.3g\n",
      what.c_str(), net.adapters().size(), fused.fusedNodes, fused.loss, plain.loss, worst);
}

}  // namespace

// The tiny preset (guidance embedded) and a config unlike it (no guidance, other widths,
// eps and mlp ratio), each with a float32 and an int8 base.
TEST(Flux2FusedPaths, TinyConfigsTrainTheSameWithTheFusedPaths) {
  for (const auto& cfg : {Flux2Config::tiny(), flux2::test::otherConfig()}) {
    for (const bool int8 : {false, true}) {
      at::manual_seed(7);
      flux2::Flux2Transformer model(cfg);
      if (int8)
        for (auto& slot : model.blockList().blocks) nn::quantizeLinears(*slot.block, nn::QuantType::Int8);
      const auto net = loraOnEveryLinear(model, cfg);
      const auto in = flux2::test::randomInputs(cfg, 2, 2, 3, 5);
      expectFusedEqualsUnfused(model, in, *net,
                               std::string(cfg.guidanceEmbeds ? "tiny" : "other config") + (int8 ? ", int8 base" : ""));
    }
  }
}

// Every flux2_transformer fixture: its config, weights and inputs.
TEST(Flux2FusedPaths, EveryFixtureTrainsTheSameWithTheFusedPaths) {
  const auto fixtures = strata::test::fixturesOfKind("flux2_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux2_transformer fixture under " << strata::test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = parity::flux2ConfigOf(manifest);
    flux2::Flux2Transformer model(cfg);
    flux2::loadFlux2Weights(model, dir / "transformer.safetensors");
    at::manual_seed(17);
    const auto net = loraOnEveryLinear(model, cfg);
    expectFusedEqualsUnfused(model, parity::flux2InputsOf(io::loadSafetensors(dir / "inputs.safetensors")), *net,
                             dir.filename().string());
  }
}
