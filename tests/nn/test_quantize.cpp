// Weight-only quantization of nn::Linear (docs/quantization.md): the round-trip
// bound per row, the forward against the float Linear, gradients to the input, an
// adapter on top that trains, and the types this build can or cannot store.
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <cstdio>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::nn;

using strata::test::relL2;

namespace {

// A float copy of `lin` (same weight and bias) before it is quantized.
Linear floatCopy(const LinearImpl& lin) {
  Linear c(lin.inFeatures(), lin.outFeatures(), lin.bias.defined());
  at::NoGradGuard g;
  c->weight.copy_(lin.weight);
  if (lin.bias.defined()) c->bias.copy_(lin.bias);
  return c;
}

// Adds x A^T B^T with float32 masters: what a LoRA adapter does, kept local so nn tests need no lora/.
class TinyAdapter : public LinearAdapter {
 public:
  TinyAdapter(int64_t in, int64_t out, int64_t rank) : down(at::randn({rank, in}) * 0.1), up(at::zeros({out, rank})) {
    down.requires_grad_(true);
    up.requires_grad_(true);
  }
  at::Tensor delta(const at::Tensor& x, const at::Tensor&) override {
    return at::linear(at::linear(x.to(at::kFloat), down), up).to(x.scalar_type());
  }
  at::Tensor down, up;
};

}  // namespace

TEST(Quantize, Int8RoundTripIsWithinHalfAStepPerRow) {
  at::manual_seed(1);
  // Rows of very different magnitude, and a zero row: each row gets its own step.
  auto w = at::randn({6, 40}) * at::tensor({1e-3, 0.1, 1.0, 10.0, 0.0, 3.0}).unsqueeze(1);
  const auto q = quantizeWeight(w, QuantType::Int8);
  ASSERT_EQ(q.data.scalar_type(), at::kChar);
  ASSERT_EQ(q.scale.sizes(), at::IntArrayRef({6}));
  EXPECT_EQ(q.scale.scalar_type(), at::kFloat);
  const auto back = dequantizeWeight(q.data, q.scale, at::kFloat);
  const auto err = (back - w).abs().amax({1});  // [6]
  for (int64_t r = 0; r < 6; ++r) {
    const double step = q.scale[r].item<double>();
    const double rowMax = w[r].abs().max().item<double>();
    if (rowMax > 0) EXPECT_NEAR(step, rowMax / 127.0, 1e-6 * rowMax) << "row " << r;
    EXPECT_LE(err[r].item<double>(), 0.5 * step * (1 + 1e-5)) << "row " << r;
  }
  EXPECT_EQ(back[4].abs().max().item<double>(), 0.0);  // the zero row stays zero
  EXPECT_EQ(q.data.abs().max().item<int>(), 127);      // the range is used fully
}

TEST(Quantize, QuantizedLinearForwardIsCloseToTheFloatOne) {
  at::manual_seed(2);
  Linear lin(64, 48);
  auto ref = floatCopy(*lin);
  lin->quantize(QuantType::Int8);
  EXPECT_EQ(lin->quantType(), QuantType::Int8);
  EXPECT_EQ(lin->weight.scalar_type(), at::kChar);
  EXPECT_FALSE(lin->weight.requires_grad());
  // The module's "weight" entry is the quantized storage: the state dict keeps its keys.
  const auto params = lin->named_parameters();
  ASSERT_TRUE(params.contains("weight"));
  EXPECT_EQ(params["weight"].scalar_type(), at::kChar);
  const auto x = at::randn({3, 5, 64});
  const double e32 = relL2(lin->forward(x), ref->forward(x));
  const double e16 = relL2(lin->forward(x.to(at::kBFloat16)), ref->forward(x));
  std::printf("[quant] int8 Linear 64->48 forward rel L2 vs fp32: %.3e (fp32 compute), %.3e (bf16 compute)\n", e32,
              e16);
  EXPECT_GT(e32, 0.0);   // it is quantized
  EXPECT_LT(e32, 1e-2);  // half a step of 1/127 per row, averaged over 64 inputs
  EXPECT_LT(e16, 2e-2);
  EXPECT_EQ(lin->forward(x.to(at::kBFloat16)).scalar_type(), at::kBFloat16);
  // denseWeight is the dequantized weight, and the forward is x denseWeight^T + b.
  const auto dense = at::linear(x, lin->denseWeight(at::kFloat), lin->bias);
  EXPECT_LT(relL2(lin->forward(x), dense), 1e-5);
  EXPECT_THROW(lin->quantize(QuantType::Int8), ConfigError);
}

TEST(Quantize, GradientsReachTheInput) {
  at::manual_seed(3);
  Linear lin(16, 8);
  auto ref = floatCopy(*lin);
  lin->quantize(QuantType::Int8);
  auto x = at::randn({4, 16}).requires_grad_(true);
  auto xr = x.detach().clone().requires_grad_(true);
  lin->forward(x).pow(2).sum().backward();
  ref->forward(xr).pow(2).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_LT(relL2(x.grad(), xr.grad()), 2e-2);
}

TEST(Quantize, TheInputGradientIsTheDequantizedWeightsAndNoCopyOfItIsKept) {
  at::manual_seed(5);
  Linear lin(32, 20);
  lin->quantize(QuantType::Int8);
  const auto dense = lin->denseWeight(at::kFloat);  // [20, 32]
  auto x = at::randn({2, 7, 32}).requires_grad_(true);
  auto xr = x.detach().clone().requires_grad_(true);
  const auto upstream = at::randn({2, 7, 20});
  auto y = lin->forward(x);
  // The graph node is the quantized matmul, which saves the int8 weight and its
  // scale (alive anyway), not a float copy of the weight.
  ASSERT_TRUE(y.grad_fn());
  bool found = false;
  for (const auto& edge : y.grad_fn()->next_edges())
    if (edge.function && edge.function->name().find("QuantizedMatmul") != std::string::npos) found = true;
  if (y.grad_fn()->name().find("QuantizedMatmul") != std::string::npos) found = true;
  EXPECT_TRUE(found) << y.grad_fn()->name();
  (y * upstream).sum().backward();
  (at::linear(xr, dense, lin->bias) * upstream).sum().backward();
  EXPECT_LT(relL2(x.grad(), xr.grad()), 1e-5);
  // bf16 activations: the gradient is bf16 and close to the float one.
  auto xb = x.detach().to(at::kBFloat16).requires_grad_(true);
  (lin->forward(xb) * upstream.to(at::kBFloat16)).sum().backward();
  EXPECT_EQ(xb.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(relL2(xb.grad().to(at::kFloat), xr.grad()), 2e-2);
  // Without grad mode (sampling) the plain path runs: same values.
  at::NoGradGuard noGrad;
  EXPECT_LT(relL2(lin->forward(x), at::linear(x, dense, lin->bias)), 1e-5);
}

TEST(Quantize, AnAdapterOnAQuantizedBaseTrains) {
  at::manual_seed(4);
  Linear lin(24, 12);
  lin->quantize(QuantType::Int8);
  auto adapter = std::make_shared<TinyAdapter>(24, 12, 4);
  lin->addAdapter(adapter);
  const auto x = at::randn({32, 24});
  const auto target = lin->forwardBase(x).detach() + at::randn({32, 12}) * 0.5;
  torch::optim::AdamW opt({adapter->down, adapter->up}, torch::optim::AdamWOptions(1e-2));
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    auto loss = (lin->forward(x) - target).pow(2).mean();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  std::printf("[quant] adapter on int8 base, loss step 0: %.4f, step 19: %.4f\n", losses.front(), losses.back());
  EXPECT_LT(losses.back(), 0.8 * losses.front());
  EXPECT_EQ(adapter->down.scalar_type(), at::kFloat);  // masters stay float32
  EXPECT_EQ(lin->weight.scalar_type(), at::kChar);     // the base is untouched
}

TEST(Quantize, TypeNamesAndWhatThisBuildCanStore) {
  EXPECT_EQ(quantTypeFromName("int8"), QuantType::Int8);
  EXPECT_EQ(quantTypeFromName("qfloat8"), QuantType::QFloat8);
  EXPECT_EQ(quantTypeFromName("float8_e4m3"), QuantType::Float8E4m3);
  EXPECT_EQ(quantTypeFromName("float8_e4m3fn"), QuantType::Float8E4m3);
  EXPECT_THROW(quantTypeFromName("int4"), ConfigError);
  EXPECT_TRUE(quantTypeAvailable(QuantType::Int8));
  EXPECT_EQ(quantTypeAvailable(QuantType::QFloat8), compat::kHasFloat8);
  Linear lin(8, 4);
  if (!compat::kHasFloat8) {
    EXPECT_THROW(lin->quantize(QuantType::QFloat8), ConfigError);
    EXPECT_EQ(lin->quantType(), QuantType::None);
    return;
  }
  // fp8: per row for qfloat8, one scale for float8_e4m3; both within e4m3's 3 mantissa bits.
  at::manual_seed(5);
  const auto w = at::randn({10, 32});
  for (auto t : {QuantType::QFloat8, QuantType::Float8E4m3}) {
    const auto q = quantizeWeight(w, t);
    EXPECT_EQ(q.scale.numel(), t == QuantType::QFloat8 ? 10 : 1);
    EXPECT_LT(relL2(dequantizeWeight(q.data, q.scale, at::kFloat), w), 5e-2) << quantTypeName(t);
  }
}

// model.fp8_matmul: which Linears qualify for at::_scaled_mm, and that the switch
// is counted. The fp8 matmul itself runs on CUDA only (tests/gpu/test_fp8_gpu.cpp).
TEST(Quantize, Fp8MatmulQualifiesOnlyFp8WeightsWithDimsOfSixteen) {
  EXPECT_TRUE(fp8MatmulQualifies(3072, 12288, QuantType::QFloat8));
  EXPECT_TRUE(fp8MatmulQualifies(16, 32, QuantType::Float8E4m3));
  EXPECT_FALSE(fp8MatmulQualifies(3072, 12288, QuantType::Int8));
  EXPECT_FALSE(fp8MatmulQualifies(3072, 12288, QuantType::None));
  EXPECT_FALSE(fp8MatmulQualifies(24, 32, QuantType::QFloat8));
  EXPECT_FALSE(fp8MatmulQualifies(32, 20, QuantType::QFloat8));
  // int8 and float Linears are neither switched nor counted as falling back.
  struct Two : torch::nn::Module {
    Two() {
      a = register_module("a", Linear(32, 16));
      b = register_module("b", Linear(16, 8));
    }
    Linear a{nullptr}, b{nullptr};
  };
  auto plain = std::make_shared<Two>();
  EXPECT_EQ(enableFp8Matmul(*plain).fp8 + enableFp8Matmul(*plain).fallback, 0);
  quantizeLinears(*plain, QuantType::Int8);
  EXPECT_EQ(enableFp8Matmul(*plain).fp8 + enableFp8Matmul(*plain).fallback, 0);
  EXPECT_FALSE(plain->a->fp8Matmul());
}

TEST(Quantize, Fp8MatmulIsCountedAndOffCudaTheDequantizedPathRuns) {
  if (!compat::kHasFloat8) GTEST_SKIP() << "this LibTorch has no float8 dtypes (2.1+)";
  at::manual_seed(9);
  struct Three : torch::nn::Module {
    Three() {
      a = register_module("a", Linear(32, 48));
      b = register_module("b", Linear(48, 20));  // 20 outputs: not a multiple of 16
      c = register_module("c", Linear(20, 16));  // 20 inputs
    }
    Linear a{nullptr}, b{nullptr}, c{nullptr};
  };
  auto holder = std::make_shared<Three>();
  auto& m = *holder;
  for (auto& p : m.parameters()) p.requires_grad_(false);
  quantizeLinears(m, QuantType::QFloat8);
  const auto x = at::randn({5, 32}).to(at::kBFloat16);
  const auto before = m.c->forward(m.b->forward(m.a->forward(x)));
  const auto count = enableFp8Matmul(m);
  EXPECT_EQ(count.fp8, 1);
  EXPECT_EQ(count.fallback, 2);
  EXPECT_TRUE(m.a->fp8Matmul());
  EXPECT_FALSE(m.b->fp8Matmul());
  EXPECT_NE(fp8MatmulSummary(count).find("2 keep the dequantizing matmul"), std::string::npos);
  // On the CPU the switched Linear still takes the dequantizing matmul: the same values.
  const auto after = m.c->forward(m.b->forward(m.a->forward(x)));
  EXPECT_TRUE(at::equal(before, after));
}

// fp16 (max 65504) on a quantized base: a sum over the raw quantized values (127 per
// int8 weight, 448 per fp8 one) scaled afterwards would be inf here (4 * 200 * 127 =
// 101600), while the true output is 4 * 200 * 0.01 = 8. Forward, forwardParts (its
// column blocks accumulate past the range too) and the input gradient (1000 * 127 would
// be inf; the true one is 1000 * 0.01 = 10).
TEST(Quantize, Fp16OnAQuantizedBaseDoesNotOverflow) {
  try {
    (void)at::matmul(at::ones({2, 2}, at::kHalf), at::ones({2, 2}, at::kHalf));
  } catch (const std::exception&) {
    GTEST_SKIP() << "this LibTorch has no fp16 matmul on the CPU (1.13); LibTorch 2.x runs this";
  }
  for (auto t : {QuantType::Int8, QuantType::QFloat8, QuantType::Float8E4m3}) {
    if (!quantTypeAvailable(t)) continue;
    SCOPED_TRACE(quantTypeName(t));
    Linear lin(4, 1, /*withBias=*/false);
    {
      at::NoGradGuard g;
      lin->weight.fill_(0.01);
    }
    lin->quantize(t);
    const auto x = at::full({1, 4}, 200.0, at::kHalf);
    const auto upstream = at::full({1, 1}, 1000.0, at::kHalf);
    {
      at::NoGradGuard g;
      const auto y = lin->forward(x);  // [1, 1]
      EXPECT_EQ(y.scalar_type(), at::kHalf);
      EXPECT_NEAR(y.item<double>(), 8.0, 0.05);
      const auto yp = lin->forwardParts({x.narrow(1, 0, 2), x.narrow(1, 2, 2)});
      EXPECT_NEAR(yp.item<double>(), 8.0, 0.05);
    }
    // With autograd: the custom Functions' forward and backward.
    auto xg = x.clone().requires_grad_(true);
    const auto y = lin->forward(xg);
    EXPECT_NEAR(y.item<double>(), 8.0, 0.05);
    y.backward(upstream);
    ASSERT_TRUE(xg.grad().defined());
    EXPECT_TRUE(at::allclose(xg.grad().to(at::kFloat), at::full({1, 4}, 10.0), 0.0, 0.05)) << xg.grad();
    auto a = x.narrow(1, 0, 2).clone().requires_grad_(true);
    auto b = x.narrow(1, 2, 2).clone().requires_grad_(true);
    const auto yp = lin->forwardParts({a, b});
    EXPECT_NEAR(yp.item<double>(), 8.0, 0.05);
    yp.backward(upstream);
    ASSERT_TRUE(a.grad().defined() && b.grad().defined());
    EXPECT_TRUE(at::allclose(at::cat({a.grad(), b.grad()}, 1).to(at::kFloat), at::full({1, 4}, 10.0), 0.0, 0.05));
  }
}
