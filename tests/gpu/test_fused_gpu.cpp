// GPU checks of nn::Linear's fused paths (docs/speed.md, "built, not yet measured"; label
// gpu, they skip without CUDA): at FLUX.1-dev width and 1024 px tokens, one double and one
// single block, the activations kept for the backward with the fused paths against
// without (STRATA_FUSED_PATHS's switch), the step time of each, and the loss and LoRA
// gradients of both; then whether cuDNN attention trains an int8 base with them.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <vector>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "lora/LoraNetwork.h"
#include "models/flux/FluxLoraRules.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

namespace {

const std::vector<std::string> kPeerTargets = {"to_q",
                                               "to_k",
                                               "to_v",
                                               "to_out.0",
                                               "add_q_proj",
                                               "add_k_proj",
                                               "add_v_proj",
                                               "to_add_out",
                                               "ff.net.0.proj",
                                               "ff.net.2",
                                               "ff_context.net.0.proj",
                                               "ff_context.net.2",
                                               "proj_mlp",
                                               "single_transformer_blocks.*.proj_out"};

// FLUX.1-dev width, one double and one single block.
FluxConfig twoBlocks() {
  auto cfg = FluxConfig::fluxDev();
  cfg.numLayers = 1;
  cfg.numSingleLayers = 1;
  return cfg;
}

std::unique_ptr<FluxTransformer> build(const FluxConfig& cfg, nn::QuantType t) {
  at::manual_seed(7);
  FluxBuildOptions o;
  o.device = at::Device(at::kCUDA, 0);
  o.dtype = at::kBFloat16;
  if (t != nn::QuantType::None) o.onBlockBuilt = [t](torch::nn::Module& b) { nn::quantizeLinears(b, t); };
  auto m = std::make_unique<FluxTransformer>(cfg, o);
  for (auto& p : m->parameters()) p.requires_grad_(false);
  return m;
}

FluxInputs inputs(const FluxConfig& cfg, int64_t latentSide, int64_t textTokens) {
  const at::Device cuda(at::kCUDA, 0);
  const auto bf16 = at::TensorOptions(cuda).dtype(at::kBFloat16);
  at::manual_seed(8);
  FluxInputs in;
  in.img = at::randn({1, latentSide * latentSide, cfg.inChannels}, bf16);
  in.txt = at::randn({1, textTokens, cfg.jointAttentionDim}, bf16);
  in.pooled = at::randn({1, cfg.pooledProjectionDim}, bf16);
  in.timestep = at::full({1}, 0.5, at::TensorOptions(cuda));
  in.guidance = at::ones({1}, at::TensorOptions(cuda));
  in.imgIds = imageIds(2 * latentSide, 2 * latentSide, at::TensorOptions(cuda));
  in.txtIds = textIds(textTokens, at::TensorOptions(cuda));
  return in;
}

std::shared_ptr<lora::LoraNetwork> peerLora(FluxTransformer& m, const FluxConfig& cfg) {
  at::manual_seed(9);
  lora::LoraConfig lc;
  lc.rank = 16;
  lc.alpha = 16;
  lc.targetModules = kPeerTargets;
  auto net = lora::LoraNetwork::create(m, lc, FluxLoraRules(cfg));
  at::NoGradGuard g;
  for (const auto& a : net->adapters()) a->up.normal_(0, 0.01);  // non-zero ups: every gradient is non-zero
  return net;
}

struct Pass {
  double loss = 0;
  int64_t keptBytes = 0;  // allocated after the forward minus before: what the backward keeps
  double stepMs = 0;      // median forward + backward
  at::Tensor grads;       // every LoRA gradient, flattened, float32
};

Pass run(FluxTransformer& m, const FluxInputs& in, const at::Tensor& target, lora::LoraNetwork& net, bool fused) {
  nn::setFusedPaths(fused);
  Pass p;
  std::vector<double> ms;
  for (int i = 0; i < 4; ++i) {
    for (const auto& a : net.adapters()) {
      a->down.mutable_grad() = at::Tensor();
      a->up.mutable_grad() = at::Tensor();
    }
    synchronize();
    const int64_t before = currentAllocatedBytes();
    const auto t0 = std::chrono::steady_clock::now();
    const auto loss = (m.forward(in).to(at::kFloat) - target).pow(2).mean();
    synchronize();
    if (i == 0) p.keptBytes = currentAllocatedBytes() - before;
    loss.backward();
    synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    p.loss = loss.item<double>();
  }
  p.stepMs = medianMs({ms.begin() + 1, ms.end()});  // the first warms up
  std::vector<at::Tensor> g;
  for (const auto& a : net.adapters()) {
    g.push_back(a->down.grad().flatten().to(at::kFloat));
    g.push_back(a->up.grad().flatten().to(at::kFloat));
  }
  p.grads = at::cat(g);
  nn::setFusedPaths(true);
  return p;
}

}  // namespace

// Predicted saving of what the backward keeps at 1024 px (4096 image + 512 text tokens,
// MLP 12288, bf16): the double block's GELU outputs, 4608 x 12288 x 2 B (113 MB); the
// single block's GELU output (113 MB) on a bf16 base, or on an int8 base the concatenated
// [4608, 15360] proj_out input (142 MB) that proj_out's LoRA kept.
TEST(FusedGpu, FluxDevBlocksKeepLessAndTrainTheSameAt1024) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  compat::setCudnnAttention(false);  // flash: the kept-bytes prediction was measured with it
  const auto cfg = twoBlocks();
  const auto in = inputs(cfg, 64, 512);
  at::manual_seed(10);
  const auto target = at::randn({1, 64 * 64, cfg.outChannels}, at::TensorOptions(at::Device(at::kCUDA, 0)));
  for (const auto t : {nn::QuantType::None, nn::QuantType::Int8}) {
    auto m = build(cfg, t);
    auto net = peerLora(*m, cfg);
    const auto off = run(*m, in, target, *net, false);
    const auto on = run(*m, in, target, *net, true);
    const int64_t tokens = 4096 + 512;
    // double block: the GELU output; single block: the GELU output (bf16) or the whole
    // concatenated input it was a part of (int8)
    const double predicted = 2.0 * tokens * cfg.mlpHiddenSize() +
                             2.0 * tokens * (cfg.mlpHiddenSize() + (t == nn::QuantType::None ? 0 : cfg.hiddenSize()));
    const double saved = static_cast<double>(off.keptBytes - on.keptBytes);
    std::cout << "[fused gpu] " << (t == nn::QuantType::None ? "bf16" : "int8") << " base, 1 double + 1 single block, "
              << "1024 px: kept for the backward " << off.keptBytes / 1e6 << " MB unfused, " << on.keptBytes / 1e6
              << " MB fused (saved " << saved / 1e6 << " MB, predicted " << predicted / 1e6 << "); fwd+bwd "
              << off.stepMs << " ms unfused, " << on.stepMs << " ms fused; loss " << off.loss << " / " << on.loss
              << "; LoRA gradients rel L2 " << relL2(on.grads, off.grads) << std::endl;
    EXPECT_GE(saved, 0.95 * predicted);
    EXPECT_LT(std::abs(on.loss - off.loss) / off.loss, 1e-2);
    EXPECT_LT(relL2(on.grads, off.grads), 3e-2);  // bf16 rounding of differently ordered sums
    EXPECT_GT(off.grads.abs().sum().item<double>(), 0.0);
    m.reset();
    train::releaseDeviceCaches();
  }
}

// The suspicion of docs/speed.md: cuDNN attention failed on every quantized base, whose
// single blocks concatenated proj_out's input (the attention gradient then came back as a
// strided narrow). With the fused paths the gradient arrives in the output's layout; this
// trains an int8 base with cuDNN attention for 3 steps and checks every gradient is finite.
// Last in the file: an illegal memory access leaves the CUDA context unusable.
TEST(FusedGpu, ZzCudnnAttentionOnAnInt8BaseWithTheFusedPaths) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (!compat::setCudnnAttention(true)) GTEST_SKIP() << "this LibTorch has no cuDNN attention switch";
  const auto cfg = twoBlocks();
  const auto in = inputs(cfg, 32, 512);  // 512 px
  at::manual_seed(11);
  const auto target = at::randn({1, 32 * 32, cfg.outChannels}, at::TensorOptions(at::Device(at::kCUDA, 0)));
  auto m = build(cfg, nn::QuantType::Int8);
  auto net = peerLora(*m, cfg);
  for (int step = 0; step < 3; ++step) {
    const auto loss = (m->forward(in).to(at::kFloat) - target).pow(2).mean();
    loss.backward();
    bool finite = true;
    for (const auto& a : net->adapters())
      finite = finite && a->down.grad().isfinite().all().item<bool>() && a->up.grad().isfinite().all().item<bool>();
    std::cout << "[fused gpu] cuDNN attention, int8 base, step " << step << ": loss " << loss.item<double>()
              << (finite ? ", every LoRA gradient finite" : ", a LoRA gradient is NOT finite") << std::endl;
    EXPECT_TRUE(finite) << "step " << step;
    for (const auto& a : net->adapters()) {
      a->down.mutable_grad() = at::Tensor();
      a->up.mutable_grad() = at::Tensor();
    }
  }
  compat::setCudnnAttention(false);
}
