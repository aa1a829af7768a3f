// GPU checks of model.fp8_matmul (label gpu; they skip without CUDA, on a build
// without at::_scaled_mm, or on a card below sm_89): a quantized Linear's fp8 matmul
// against its dequantizing matmul at FLUX.1-dev shapes (forward and input gradient,
// both backward choices, timed), one FLUX.1-dev double and single block with random
// weights against bf16 for every path, every flux_transformer fixture on CUDA, a
// 30-step LoRA loss curve on a qfloat8 + fp8-matmul base beside the bf16 one, and
// sibling Linears quantizing their shared input once, a kept transposed weight for the
// fp8 backward, and a Llama run from a folder
// on a qfloat8 base with the fp8 matmul.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>
#include <tuple>
#include <vector>

#include "common/Error.h"
#include "common/ReferenceFixtures.h"
#include "common/TestSupport.h"
#include "common/Text.h"
#include "common/TorchCompat.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "gpu/GpuStats.h"
#include "gpu/LoraLossCurve.h"
#include "io/Safetensors.h"
#include "models/flux/FluxCheckpoint.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "models/llama/LlamaCheckpoint.h"
#include "nn/Linear.h"
#include "nn/QuantKernels.h"
#include "nn/Quantize.h"
#include "placement/QuantScaleAttachment.h"
#include "parity/FluxFixture.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

using namespace strata;
using namespace strata::flux;
using namespace strata::test::gpu;

namespace {

// e4m3 keeps 3 mantissa bits: rounding the input per token costs ~3% of a matmul's
// output (relative L2; half a step is 1/16 of a value, ~2.7% RMS over a binade).
constexpr double kFp8VsDequantized = 5e-2;

// Why this machine cannot run the fp8 matmul, or "".
std::string whyNoFp8() {
  if (!compat::kHasScaledMm) return "this LibTorch has no at::_scaled_mm with row-wise scales (2.5+)";
  for (const auto& d : device::listDevices())
    if (d.index == 0) {
      if (d.ccMajor * 10 + d.ccMinor < 89)
        return "cuda:0 is sm_" + std::to_string(d.ccMajor) + std::to_string(d.ccMinor) + ", fp8 needs sm_89+";
      return "";
    }
  return "no cuda:0";
}

#define STRATA_REQUIRE_FP8()      \
  STRATA_REQUIRE_CUDA_DEVICES(1); \
  if (const auto why = whyNoFp8(); !why.empty()) GTEST_SKIP() << why;

const at::Device kCuda(at::kCUDA, 0);

enum class Path { Bf16, Dequantized, Fp8Forward, Fp8Both };
const char* pathName(Path p) {
  switch (p) {
    case Path::Bf16:
      return "bf16";
    case Path::Dequantized:
      return "dequantized";
    case Path::Fp8Forward:
      return "fp8 matmul (bf16 backward)";
    case Path::Fp8Both:
      return "fp8 matmul (fp8 backward)";
  }
  return "?";
}

// Quantizes `m` for `path` and switches the fp8 matmul on; the count of fp8 Linears.
nn::Fp8MatmulCount prepare(torch::nn::Module& m, nn::QuantType t, Path path) {
  if (path == Path::Bf16) return {};
  nn::quantizeLinears(m, t);
  if (path == Path::Dequantized) return {};
  return nn::enableFp8Matmul(m, path == Path::Fp8Both ? nn::Fp8Backward::Fp8 : nn::Fp8Backward::Bf16);
}

template <class F>
double medianMsOf(int reps, F&& f) {
  f();  // warm-up (cuBLAS / CUTLASS picks its kernel)
  synchronize();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return medianMs(ms);
}

}  // namespace

TEST(Fp8Gpu, LinearMatchesTheDequantizedMatmulAtFluxDevShapes) {
  STRATA_REQUIRE_FP8();
  struct Shape {
    int64_t m, k, n;
    const char* what;
  };
  // 1024 px: 4096 image + 512 text tokens in a single block; the double block's image stream has 4096.
  const std::vector<Shape> shapes = {{4096, 3072, 3072, "attention q/k/v/out"},
                                     {4096, 3072, 12288, "mlp in"},
                                     {4096, 12288, 3072, "mlp out"},
                                     {4608, 15360, 3072, "single proj_out"},
                                     {1, 3072, 18432, "modulation (one row)"}};
  for (const auto t : {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3}) {
    for (const auto& s : shapes) {
      at::manual_seed(11);
      nn::Linear lin(s.k, s.n, true, at::TensorOptions(kCuda).dtype(at::kBFloat16));
      for (auto& p : lin->parameters()) p.requires_grad_(false);
      const auto denseBf16 = lin->weight.detach().clone();
      const auto bias = lin->bias.detach().clone();
      lin->quantize(t);
      const auto x0 = at::randn({1, s.m, s.k}, at::TensorOptions(kCuda).dtype(at::kBFloat16));
      const auto up = at::randn({1, s.m, s.n}, at::TensorOptions(kCuda).dtype(at::kBFloat16));
      auto run = [&](bool backward) {
        auto x = x0.detach().requires_grad_(backward);
        auto y = lin->forward(x);
        if (backward) (y * up).sum().backward();
        return std::make_pair(y.detach(), backward ? x.grad() : at::Tensor());
      };
      const auto [y0, g0] = run(true);  // the dequantizing matmul
      const auto yb = at::linear(x0, denseBf16, bias);
      const double fwdMs0 = medianMsOf(10, [&] { run(false); });
      const double stepMs0 = medianMsOf(10, [&] { run(true); });
      const double bf16Ms = medianMsOf(10, [&] {
        auto xx = x0.detach().requires_grad_(true);
        (at::linear(xx, denseBf16, bias) * up).sum().backward();
      });
      for (const auto backward : {nn::Fp8Backward::Bf16, nn::Fp8Backward::Fp8}) {
        ASSERT_TRUE(lin->useFp8Matmul(backward));
        const auto [y1, g1] = run(true);
        const double fwdErr = relL2(y1, y0);
        const double gradErr = relL2(g1, g0);
        const double fwdMs = medianMsOf(10, [&] { run(false); });
        const double stepMs = medianMsOf(10, [&] { run(true); });
        std::cout << "[fp8 gpu] " << nn::quantTypeName(t) << " " << s.what << " [" << s.m << "x" << s.k << "] x ["
                  << s.k << "x" << s.n << "], " << (backward == nn::Fp8Backward::Fp8 ? "fp8" : "bf16")
                  << " backward: forward rel. L2 vs dequantized " << fwdErr << " (dequantized vs bf16 weights "
                  << relL2(y0, yb) << "), input grad vs dequantized " << gradErr << "; forward " << fwdMs
                  << " ms (dequantized " << fwdMs0 << "), forward+backward " << stepMs << " ms (dequantized " << stepMs0
                  << ", bf16 weights " << bf16Ms << ")" << std::endl;
        EXPECT_EQ(y1.scalar_type(), at::kBFloat16);
        EXPECT_LT(fwdErr, kFp8VsDequantized) << s.what;
        EXPECT_GT(fwdErr, 0.0) << s.what << ": the fp8 matmul did not run";
        if (backward == nn::Fp8Backward::Bf16)
          EXPECT_LT(gradErr, 1e-2) << s.what << ": the bf16 backward is the dequantized one";
        else
          EXPECT_LT(gradErr, kFp8VsDequantized) << s.what;
      }
    }
  }
}

// Linears that read one input (nn::forwardSiblings: a single block's q, k, v, proj_mlp)
// quantize it once between them: one quantization kernel for the four forwards, and the
// same outputs and input gradient, bit for bit, as each Linear's own forward.
TEST(Fp8Gpu, SiblingsQuantizeTheirSharedInputOnce) {
  STRATA_REQUIRE_FP8();
  ASSERT_TRUE(nn::quantKernelsBuilt()) << "a CUDA build without the nn kernels";
  struct FusedOn {  // whatever STRATA_FUSED_PATHS says: the sharing is a fused path
    bool was = nn::fusedPaths();
    FusedOn() { nn::setFusedPaths(true); }
    ~FusedOn() { nn::setFusedPaths(was); }
  } fusedOn;
  const auto opts = at::TensorOptions(kCuda).dtype(at::kBFloat16);
  at::manual_seed(17);
  std::vector<nn::Linear> lins{nn::Linear(256, 256, true, opts), nn::Linear(256, 256, true, opts),
                               nn::Linear(256, 256, true, opts), nn::Linear(256, 1024, true, opts)};
  std::vector<nn::LinearImpl*> ptrs;
  for (auto& lin : lins) {
    for (auto& p : lin->parameters()) p.requires_grad_(false);
    lin->quantize(nn::QuantType::QFloat8);
    ASSERT_TRUE(lin->useFp8Matmul(nn::Fp8Backward::Fp8));
    ptrs.push_back(lin.get());
  }
  const auto x0 = at::randn({2, 96, 256}, opts);
  const auto g = at::randn({2, 96, 256 * 3 + 1024}, opts);
  auto run = [&](bool siblings) {
    const auto x = x0.detach().requires_grad_(true);
    const int64_t before = nn::quantKernelLaunches();
    std::vector<at::Tensor> out;
    if (siblings) {
      out = nn::forwardSiblings(ptrs, x);
    } else {
      for (auto* lin : ptrs) out.push_back(lin->forward(x));
    }
    const int64_t launches = nn::quantKernelLaunches() - before;
    const auto y = at::cat(out, -1);
    (y.to(at::kFloat) * g.to(at::kFloat)).sum().backward();
    return std::make_tuple(launches, y.detach(), x.grad());
  };
  const auto [eachLaunches, yEach, gEach] = run(false);
  const auto [launches, y, gx] = run(true);
  EXPECT_EQ(eachLaunches, 4);
  EXPECT_EQ(launches, 1) << "the shared input was quantized more than once";
  EXPECT_TRUE(at::equal(y, yEach));
  EXPECT_TRUE(at::equal(gx, gEach));
  // Nothing is kept past a call (the scope, not the version key, which one call cannot
  // show from outside): the same tensor, changed in place, is quantized anew.
  at::NoGradGuard noGrad;
  auto x = x0.clone();
  const int64_t before = nn::quantKernelLaunches();
  const auto a = nn::forwardSiblings({ptrs[0]}, x);
  x.mul_(2);
  const auto b = nn::forwardSiblings({ptrs[0]}, x);
  EXPECT_EQ(nn::quantKernelLaunches() - before, 2);
  EXPECT_FALSE(at::equal(a[0], b[0]));
}

// model.fp8_keep_transpose (nn::Fp8Backward::Fp8KeptTranspose): the transposed fp8 weight
// is made by the first forward whose backward needs it (not under no-grad, not for an
// input without a gradient), kept (the same storage on the next step), gives the input
// gradient of the per-backward copy bit for bit, and travels with the scale's attachment
// (listed for the audit, moved, and made anew on the weight's card if it is elsewhere).
TEST(Fp8Gpu, AKeptTransposeIsMadeOnceWhereABackwardFollowsAndGivesTheSameGradient) {
  STRATA_REQUIRE_FP8();
  const auto opts = at::TensorOptions(kCuda).dtype(at::kBFloat16);
  for (const auto t : {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3}) {
    SCOPED_TRACE(nn::quantTypeName(t));
    at::manual_seed(23);
    auto lin = std::make_shared<nn::LinearImpl>(3072, 12288, true, opts);
    for (auto& p : lin->parameters()) p.requires_grad_(false);
    lin->quantize(t);
    const auto x0 = at::randn({2, 2048, 3072}, opts);
    const auto up = at::randn({2, 2048, 12288}, opts);
    auto run = [&](bool backward) {
      auto x = x0.detach().requires_grad_(backward);
      auto y = lin->forward(x);
      if (backward) (y * up).sum().backward();
      return std::make_pair(y.detach(), backward ? x.grad() : at::Tensor());
    };
    ASSERT_TRUE(lin->useFp8Matmul(nn::Fp8Backward::Fp8));
    const auto [yPer, gPer] = run(true);
    EXPECT_FALSE(lin->keptWeightTranspose().defined()) << "Fp8 makes its copy per backward";
    const double perMs = medianMsOf(10, [&] { run(true); });

    ASSERT_TRUE(lin->useFp8Matmul(nn::Fp8Backward::Fp8KeptTranspose));
    {
      at::NoGradGuard noGrad;  // checkpointing's first pass: an input that wants a gradient, no graph
      (void)lin->forward(x0.detach().requires_grad_(true));
    }
    run(false);  // an input without a gradient: no backward follows
    EXPECT_FALSE(lin->keptWeightTranspose().defined()) << "made where no backward follows";
    const auto [yKept, gKept] = run(true);
    const at::Tensor kept = lin->keptWeightTranspose();
    ASSERT_TRUE(kept.defined());
    EXPECT_EQ(kept.sizes(), (std::vector<int64_t>{3072, 12288}));
    EXPECT_EQ(kept.device(), lin->weight.device());
    EXPECT_TRUE(kept.is_contiguous());
    EXPECT_TRUE(at::equal(kept.view(at::kByte), lin->weight.t().contiguous().view(at::kByte)));
    EXPECT_TRUE(at::equal(yKept, yPer));
    EXPECT_TRUE(at::equal(gKept, gPer)) << "the kept copy changed the input gradient";
    const double keptMs = medianMsOf(10, [&] { run(true); });
    EXPECT_EQ(lin->keptWeightTranspose().data_ptr(), kept.data_ptr()) << "made again on a later step";
    std::cout << "[fp8 gpu] " << nn::quantTypeName(t) << " [4096x3072] x [3072x12288], fp8 backward: forward+backward "
              << perMs << " ms with a transposed copy per backward, " << keptMs << " ms with the kept one ("
              << formatBytes(kept.numel()) << " kept)" << std::endl;

    // Its attachment (made by forModel for this Linear) lists it for the audit and moves
    // it; a copy left elsewhere than the weight is not used but made again on its card.
    auto holder = std::make_shared<torch::nn::Module>();
    holder->register_module("fc", lin);
    std::shared_ptr<placement::Attachment> attachment;
    for (const auto& a : placement::QuantScaleAttachment::forModel(*holder))
      if (a->kind() == placement::keptTransposeKind()) attachment = a;
    ASSERT_TRUE(attachment) << "forModel made no fp8_transpose attachment";
    ASSERT_EQ(attachment->tensors().size(), 1u);
    EXPECT_EQ(attachment->tensors()[0].first, "weight_transposed");
    EXPECT_TRUE(attachment->tensors()[0].second.is_same(lin->keptWeightTranspose()));
    attachment->moveTo(at::Device(at::kCPU));
    EXPECT_TRUE(lin->keptWeightTranspose().is_cpu());
    attachment->moveTo(kCuda);
    EXPECT_TRUE(lin->keptWeightTranspose().is_cuda());
    lin->moveKeptWeightTranspose(at::Device(at::kCPU));
    const auto [yAgain, gAgain] = run(true);
    EXPECT_TRUE(lin->keptWeightTranspose().is_cuda());
    EXPECT_TRUE(at::equal(gAgain, gPer));

    // Back to the per-backward copy: the kept one is dropped.
    ASSERT_TRUE(lin->useFp8Matmul(nn::Fp8Backward::Fp8));
    EXPECT_FALSE(lin->keptWeightTranspose().defined());
  }
}

namespace {

struct BlockRun {
  at::Tensor img, txt;  // outputs
  double ms = 0;        // forward + backward
};

// One FLUX.1-dev block (seeded random weights) on `io`, for `path`; output and timing.
template <class BlockT>
BlockRun runBlock(const FluxConfig& cfg, const nn::BlockIO& io, nn::QuantType t, Path path, int64_t* fp8Count) {
  at::manual_seed(21);
  auto block = std::make_shared<BlockT>(cfg, FluxBuildOptions{kCuda, at::kBFloat16});
  for (auto& p : block->parameters()) p.requires_grad_(false);
  *fp8Count = prepare(*block, t, path).fp8;
  BlockRun r;
  {
    at::NoGradGuard g;
    const auto out = block->forward(io);
    r.img = out.img;
    r.txt = out.txt;
  }
  r.ms = medianMsOf(5, [&] {
    auto in = io;
    in.img = io.img.detach().requires_grad_(true);
    in.txt = io.txt.detach().requires_grad_(true);
    const auto out = block->forward(in);
    auto loss = out.img.to(at::kFloat).square().mean();
    if (out.txt.defined()) loss = loss + out.txt.to(at::kFloat).square().mean();
    loss.backward();
  });
  return r;
}

// Relative L2 of the block's own contribution (output minus input): the residual
// stream is the same on every path and would hide the error.
double deltaRelL2(const BlockRun& a, const BlockRun& ref, const nn::BlockIO& io) {
  auto delta = [&](const BlockRun& r) {
    auto d = (r.img - io.img).to(at::kFloat).flatten();
    if (r.txt.defined()) d = at::cat({d, (r.txt - io.txt).to(at::kFloat).flatten()});
    return d;
  };
  return relL2(delta(a), delta(ref));
}

}  // namespace

TEST(Fp8Gpu, FluxDevDoubleAndSingleBlockAgainstBf16) {
  STRATA_REQUIRE_FP8();
  const auto cfg = FluxConfig::fluxDev();
  const int64_t side = 64, textTokens = 512;  // 1024 px
  const auto bf16 = at::TensorOptions(kCuda).dtype(at::kBFloat16);
  at::manual_seed(5);
  nn::BlockIO io;
  io.img = at::randn({1, side * side, cfg.hiddenSize()}, bf16);
  io.txt = at::randn({1, textTokens, cfg.hiddenSize()}, bf16);
  io.temb = at::randn({1, cfg.hiddenSize()}, bf16);
  const auto ids = at::cat(
      {textIds(textTokens, at::TensorOptions(kCuda)), imageIds(2 * side, 2 * side, at::TensorOptions(kCuda))}, 0);
  std::tie(io.ropeCos, io.ropeSin) = rotaryFromIds(ids, cfg.axesDimsRope, cfg.ropeTheta);
  struct Case {
    nn::QuantType t;
    Path path;
  };
  const std::vector<Case> cases = {
      {nn::QuantType::Int8, Path::Dequantized},       {nn::QuantType::QFloat8, Path::Dequantized},
      {nn::QuantType::Float8E4m3, Path::Dequantized}, {nn::QuantType::QFloat8, Path::Fp8Forward},
      {nn::QuantType::QFloat8, Path::Fp8Both},        {nn::QuantType::Float8E4m3, Path::Fp8Forward},
      {nn::QuantType::Float8E4m3, Path::Fp8Both}};
  auto check = [&](const char* kind, auto runOne) {
    int64_t n = 0;
    const BlockRun ref = runOne(nn::QuantType::None, Path::Bf16, &n);
    std::cout << "[fp8 gpu] FLUX.1-dev " << kind << " block, 1024 px, bf16: forward+backward " << ref.ms << " ms"
              << std::endl;
    for (const auto& c : cases) {
      const BlockRun r = runOne(c.t, c.path, &n);
      const double err = deltaRelL2(r, ref, io);
      const double outErr = relL2(r.img, ref.img);
      std::cout << "[fp8 gpu] FLUX.1-dev " << kind << " block, " << nn::quantTypeName(c.t) << " " << pathName(c.path)
                << (c.path == Path::Fp8Forward || c.path == Path::Fp8Both ? " (" + std::to_string(n) + " fp8 Linears)"
                                                                          : std::string())
                << ": block delta rel. L2 vs bf16 " << err << ", image output rel. L2 " << outErr
                << "; forward+backward " << r.ms << " ms (bf16 " << ref.ms << ")" << std::endl;
      EXPECT_LT(err, c.t == nn::QuantType::Int8 ? 5e-2 : 1.5e-1) << kind << " " << pathName(c.path);
      if (c.path == Path::Fp8Forward || c.path == Path::Fp8Both) EXPECT_GT(n, 0);
    }
  };
  check("double", [&](nn::QuantType t, Path p, int64_t* n) { return runBlock<FluxDoubleBlock>(cfg, io, t, p, n); });
  check("single", [&](nn::QuantType t, Path p, int64_t* n) { return runBlock<FluxSingleBlock>(cfg, io, t, p, n); });
}

TEST(Fp8Gpu, EveryFluxFixtureForwardAgainstBf16) {
  STRATA_REQUIRE_FP8();
  const auto fixtures = test::fixturesOfKind("flux_transformer");
  ASSERT_FALSE(fixtures.empty()) << "no flux_transformer fixture under " << test::referenceDir();
  for (const auto& [dir, manifest] : fixtures) {
    SCOPED_TRACE(dir.string());
    const auto cfg = FluxConfig::fromDiffusersJson(manifest.at("config"));
    const auto inputs = parity::inputsOf(io::loadSafetensors(dir / "inputs.safetensors"), kCuda);
    at::NoGradGuard noGrad;
    auto runPath = [&](nn::QuantType t, Path path, int64_t* fp8, int64_t* fallback) {
      FluxTransformer m(cfg, {kCuda, at::kBFloat16});
      loadFluxWeights(m, dir / "transformer.safetensors");
      nn::Fp8MatmulCount c;
      for (auto& slot : m.blockList().blocks) c += prepare(*slot.block, t, path);
      *fp8 = c.fp8;
      *fallback = c.fallback;
      return m.forward(inputs).to(at::kFloat);
    };
    int64_t fp8 = 0, fallback = 0;
    const auto ref = runPath(nn::QuantType::None, Path::Bf16, &fp8, &fallback);
    for (const auto t : {nn::QuantType::Int8, nn::QuantType::QFloat8, nn::QuantType::Float8E4m3})
      for (const auto path : {Path::Dequantized, Path::Fp8Forward}) {
        if (t == nn::QuantType::Int8 && path != Path::Dequantized) continue;
        const double err = relL2(runPath(t, path, &fp8, &fallback), ref);
        std::cout << "[fp8 gpu] " << dir.filename().string() << ": " << nn::quantTypeName(t) << " " << pathName(path)
                  << " on CUDA: forward rel. L2 vs the bf16 base " << err;
        if (path == Path::Fp8Forward) std::cout << " (" << fp8 << " fp8 Linears, " << fallback << " fall back)";
        std::cout << std::endl;
        EXPECT_LT(err, t == nn::QuantType::Int8 ? 3e-2 : 1.5e-1) << nn::quantTypeName(t) << " " << pathName(path);
        if (path == Path::Fp8Forward) EXPECT_GT(fp8, 0);
      }
  }
}

namespace {

// The base built for `path` (the same random weights every time), then the 30-step LoRA curve on it.
std::vector<double> lossCurve(const FluxConfig& cfg, nn::QuantType t, Path path, const FluxInputs& in,
                              const at::Tensor& target) {
  at::manual_seed(31);
  FluxBuildOptions o{kCuda, at::kBFloat16};
  o.onBlockBuilt = [&](torch::nn::Module& b) { prepare(b, t, path); };
  FluxTransformer model(cfg, o);
  for (auto& p : model.parameters()) p.requires_grad_(false);
  return loraLossCurve(model, cfg, in, target, 32);
}

}  // namespace

TEST(Fp8Gpu, LossCurveOnAQfloat8Fp8MatmulBaseStaysCloseToBf16) {
  STRATA_REQUIRE_FP8();
  const auto [cfg, in, target] = fluxDevWidthCase(kCuda);
  const auto ref = lossCurve(cfg, nn::QuantType::None, Path::Bf16, in, target);
  printLossCurve("fp8 gpu", "bf16", ref);
  for (const auto path : {Path::Dequantized, Path::Fp8Forward, Path::Fp8Both}) {
    const auto curve = lossCurve(cfg, nn::QuantType::QFloat8, path, in, target);
    printLossCurve("fp8 gpu", std::string("qfloat8 ") + pathName(path), curve);
    const CurveGap gap = curveGap(curve, ref);
    const double maxGap = gap.max;
    std::cout << "[fp8 gpu] qfloat8 " << pathName(path) << ": loss vs bf16 over 30 steps, max relative difference "
              << maxGap << ", mean " << gap.mean << "; first/last " << curve.front() << " / " << curve.back()
              << " (bf16 " << ref.front() << " / " << ref.back() << ")" << std::endl;
    EXPECT_LT(curve.back(), curve.front()) << pathName(path) << ": the LoRA does not learn";
    // The same bound as the FLUX.1-dev-sized curves of the dequantizing matmul
    // (test_quant_gpu.cpp): a tenth of the loss, far above the step-to-step noise of
    // bf16 and far below the loss's fall over the run.
    EXPECT_LT(maxGap, 0.1) << pathName(path);
  }
}

// The probe a run makes before its first step (model.fp8_matmul): a module without an
// fp8-matmul Linear is not probed; one with it runs the fp8 matmul on the card; one
// whose fp8 matmul throws (here its scale is not the [out] rows the matmul reads) is
// refused with an Error naming the device.
TEST(Fp8Gpu, TheFp8MatmulProbeRunsOnTheCardAndNamesTheDeviceWhenItFails) {
  STRATA_REQUIRE_FP8();
  const auto opts = at::TensorOptions(kCuda).dtype(at::kBFloat16);
  nn::Linear int8(64, 32, true, opts);
  int8->quantize(nn::QuantType::Int8);
  EXPECT_FALSE(nn::checkFp8Matmul(*int8, at::kBFloat16));
  nn::Linear fp8(64, 32, true, opts);
  fp8->quantize(nn::QuantType::QFloat8);
  ASSERT_TRUE(fp8->useFp8Matmul());
  EXPECT_TRUE(nn::checkFp8Matmul(*fp8, at::kBFloat16));
  fp8->weightScale = at::ones({3}, fp8->weightScale.options());
  try {
    nn::checkFp8Matmul(*fp8, at::kBFloat16);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the fp8 matmul does not run on cuda:0 (a 64 x 32 Linear)"), std::string::npos)
        << e.what();
  }
}

// A Llama-family run from a model folder with model.quantize (qfloat8) and
// model.fp8_matmul: the model streams in layer by layer, every decoder Linear takes
// the fp8 matmul (the plan says how many), the probe passes on the card, and the
// first losses stay close to the same run on the bf16 base.
TEST(Fp8Gpu, LlamaFromAFolderTrainsOnAQfloat8BaseWithTheFp8Matmul) {
  STRATA_REQUIRE_FP8();
  test::TempDir tmp;
  llama::LlamaConfig lc = llama::LlamaConfig::tiny();
  lc.hiddenSize = 128;
  lc.intermediateSize = 256;
  lc.numHiddenLayers = 3;
  lc.numAttentionHeads = 4;
  lc.numKeyValueHeads = 2;
  lc.headDim = 32;
  lc.vocabSize = 256;
  at::manual_seed(21);
  {
    llama::LlamaForCausalLM source(lc, llama::LlamaBuildOptions{at::kCPU, at::kBFloat16});
    llama::saveLlamaFolder(source, tmp / "model");
  }
  auto runWith = [&](bool quantized, std::vector<events::LoadProgressEvent>* loads, std::string* reason,
                     bool keepTranspose = false, std::vector<events::PlacementEvent>* placements = nullptr) {
    config::RunConfig c;
    c.job.name = keepTranspose ? "k" : quantized ? "q" : "b";
    c.job.trainingFolder = tmp.path().string();
    c.model.arch = std::string("llama");
    c.model.nameOrPath = (tmp / "model").string();
    c.model.device = config::ComputeDevice::Cuda;
    c.model.gpuIds = {0};
    c.model.quantize = quantized;
    c.model.qtype = "qfloat8";
    c.model.fp8Matmul = quantized;
    c.model.fp8Backward = quantized;
    c.model.fp8KeepTranspose = keepTranspose;
    c.network.linear = 8;
    c.network.linearAlpha = 8;
    c.train.steps = 12;
    c.train.batchSize = 2;
    c.train.lr = 1e-3;
    c.train.dtype = config::DType::BF16;
    c.train.seed = 5;
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.numItems = 16;
    d.maxSeqLen = 64;
    c.datasets = {d};
    c.sample.sampleEvery = 0;
    c.save.saveEvery = 0;
    c.save.exportFormats = {};
    events::EventBus bus;
    std::vector<double> losses;
    std::string problems;
    auto sub = bus.subscribe([&](const events::Event& e) {
      if (auto* s = std::get_if<events::StepEvent>(&e)) losses.push_back(s->loss);
      if (auto* l = std::get_if<events::LoadProgressEvent>(&e); l && loads) loads->push_back(*l);
      if (auto* p = std::get_if<events::PlacementEvent>(&e); p && reason) *reason = p->reason;
      if (auto* p = std::get_if<events::PlacementEvent>(&e); p && placements) placements->push_back(*p);
      if (auto* f = std::get_if<events::FailedEvent>(&e)) problems += f->message + "\n";
      if (auto* f = std::get_if<events::PreflightFailedEvent>(&e))
        for (const auto& m : f->problems) problems += m + "\n";
    });
    train::TrainerOptions o;
    o.runDir = tmp / ("run-" + c.job.name);
    EXPECT_EQ(train::Trainer(c, bus, o).run(), train::RunOutcome::Finished) << problems;
    return losses;
  };
  std::vector<events::LoadProgressEvent> loads;
  std::string reason;
  std::vector<events::PlacementEvent> fp8Placements;
  const auto fp8 = runWith(true, &loads, &reason, false, &fp8Placements);
  const auto bf16 = runWith(false, nullptr, nullptr);
  ASSERT_EQ(fp8.size(), 12u);
  ASSERT_EQ(bf16.size(), 12u);
  EXPECT_NE(reason.find("fp8 matmul: 21 Linears"), std::string::npos) << reason;  // 7 per layer, lm_head stays bf16
  ASSERT_EQ(loads.size(), 4u);                                                    // three layers, then the rest
  for (size_t i = 0; i < loads.size(); ++i) {
    EXPECT_EQ(loads[i].what, events::kLoadLanguageModel);
    EXPECT_EQ(loads[i].done, static_cast<int64_t>(i) + 1);
  }
  double worst = 0;
  std::string curve;
  for (size_t i = 0; i < fp8.size(); ++i) {
    ASSERT_TRUE(std::isfinite(fp8[i])) << "step " << i + 1;
    worst = std::max(worst, std::abs(fp8[i] - bf16[i]) / bf16[i]);
    curve += " " + std::to_string(fp8[i]) + "/" + std::to_string(bf16[i]);
  }
  std::cout << "[fp8 gpu] Llama qfloat8 + fp8 matmul from a folder, losses fp8/bf16:" << curve
            << "; max relative difference " << worst << std::endl;
  EXPECT_LT(worst, 0.05) << curve;

  // model.fp8_keep_transpose: the same losses bit for bit; the copies are made by step 1,
  // one per fp8 Linear whose input gets a gradient (all but layer 0's q, k and v, which
  // read the embeddings), then audited and shown in the placement event after step 1
  // (which every fresh run has: step 1 makes the optimizer state).
  std::vector<events::PlacementEvent> placements;
  const auto kept = runWith(true, nullptr, nullptr, true, &placements);
  ASSERT_EQ(kept.size(), 12u);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i], fp8[i]) << "step " << i + 1;
  ASSERT_EQ(placements.size(), 2u) << "no placement event after the first step";
  ASSERT_EQ(fp8Placements.size(), 2u);
  const int64_t madeByStep1 = placements[1].checkedTensors - placements[0].checkedTensors;
  const int64_t optimizerMadeByStep1 = fp8Placements[1].checkedTensors - fp8Placements[0].checkedTensors;
  auto keptCopies = [](const events::PlacementEvent& p) {
    int64_t count = 0, bytes = 0;
    for (const auto& b : p.blocks)
      for (const auto& a : b.attachments)
        if (a.kind == "fp8_transpose") count += a.count, bytes += a.bytes;
    return std::make_pair(count, bytes);
  };
  // One attachment per fp8 Linear (21), their tensors made by step 1 (18).
  EXPECT_EQ(keptCopies(placements[0]), std::make_pair(int64_t{21}, int64_t{0})) << "copies made before step 1";
  EXPECT_EQ(keptCopies(placements[1]).first, 21);
  EXPECT_GT(keptCopies(placements[1]).second, 0);
  EXPECT_EQ(madeByStep1 - optimizerMadeByStep1, 18);
  EXPECT_TRUE(placements[1].audit.empty());
  std::cout << "[fp8 gpu] Llama with kept fp8 transposes: losses equal, " << madeByStep1 - optimizerMadeByStep1
            << " copies (" << formatBytes(keptCopies(placements[1]).second) << ") audited after step 1 with "
            << optimizerMadeByStep1 << " optimizer moments" << std::endl;
}
