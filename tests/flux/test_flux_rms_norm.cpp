// The RMSNorm of q and k with a frozen weight runs as its own autograd function
// (it keeps x and rstd, not a float32 copy of x): its values and input gradient
// must be those of the plain formula it replaces, in float32 and in bf16.
#include <gtest/gtest.h>

#include "common/TestSupport.h"
#include "models/flux/FluxTransformer.h"

using namespace strata::flux;

using strata::test::relL2;

namespace {

// The formula autograd differentiates by itself (diffusers' RMSNorm).
at::Tensor plainRmsNorm(const at::Tensor& x, const at::Tensor& weight) {
  const auto variance = x.to(at::kFloat).pow(2).mean(-1, true);
  auto y = x * at::rsqrt(variance + FluxConfig::kNormEps);
  if (weight.scalar_type() == at::kBFloat16) return y.to(at::kBFloat16) * weight;
  return (y * weight).to(x.scalar_type());
}

void checkAgainstPlain(at::ScalarType dtype, double valueTol, double gradTol) {
  at::manual_seed(21);
  FluxBuildOptions o;
  o.dtype = dtype;
  FluxRmsNorm norm(64, o);
  {
    at::NoGradGuard ng;
    norm->weight.copy_(at::rand({64}) + 0.5);  // not all ones, so the weight's part is checked
  }
  norm->weight.requires_grad_(false);  // frozen, as in training
  const auto base = at::randn({2, 9, 3, 64}) * 3.0;
  auto x = base.to(dtype).requires_grad_(true);
  auto xr = base.to(dtype).requires_grad_(true);
  const auto upstream = at::randn({2, 9, 3, 64}).to(dtype);
  const auto y = norm->forward(x);
  const auto yr = plainRmsNorm(xr, norm->weight);
  EXPECT_EQ(y.scalar_type(), dtype);
  EXPECT_LT(relL2(y, yr), valueTol);
  (y * upstream).sum().backward();
  (yr * upstream).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().scalar_type(), dtype);
  EXPECT_GT(x.grad().abs().max().item<double>(), 0.0);
  EXPECT_LT(relL2(x.grad(), xr.grad()), gradTol);
}

}  // namespace

TEST(FluxRmsNorm, FrozenWeightFunctionMatchesThePlainFormulaInFloat32) { checkAgainstPlain(at::kFloat, 1e-7, 1e-5); }

TEST(FluxRmsNorm, FrozenWeightFunctionMatchesThePlainFormulaInBf16) {
  // The same values (one rounding); the gradient differs only by bf16 roundings
  // inside the plain graph.
  checkAgainstPlain(at::kBFloat16, 1e-7, 2e-2);
}

TEST(FluxRmsNorm, ATrainableWeightStillGetsItsGradient) {
  FluxBuildOptions o;
  FluxRmsNorm norm(8, o);
  auto x = at::randn({4, 8}).requires_grad_(true);
  norm->forward(x).pow(2).sum().backward();
  ASSERT_TRUE(norm->weight.grad().defined());
  EXPECT_GT(norm->weight.grad().abs().sum().item<double>(), 0.0);
}
