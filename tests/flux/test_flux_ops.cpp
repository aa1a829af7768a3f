// The ATen pieces shared by the FLUX blocks (dit/DitOps.h) that do more than
// one op says: joinedTokens.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/autograd.h>

#include "common/TestSupport.h"
#include "common/Error.h"
#include "dit/DitLayers.h"
#include "dit/DitOps.h"
#include "models/flux/FluxSampling.h"
#include "models/flux/FluxTransformer.h"
#include "nn/Linear.h"

using namespace strata;
using strata::test::allClose;

namespace {

// Returns two narrows of a tensor it makes (as a checkpoint's Function returns a block's
// output): views whose base autograd does not reach through them.
struct HalvesOfACopy : torch::autograd::Function<HalvesOfACopy> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, const at::Tensor& x) {
    const auto y = x * 2;  // [B, N, D], made here: no autograd history
    return {y.narrow(1, 0, 3), y.narrow(1, 3, x.size(1) - 3)};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    return {at::cat({g[0], g[1]}, 1) * 2};
  }
};

}  // namespace

// joinedTokens is cat({txt, img}, 1); for the two halves, in order, of one tensor (a single
// block's output in BlockIO) it is that tensor, and the gradient reaches it whole.
TEST(FluxOps, JoinedTokensIsTheConcatenationAndTheWholeForHalves) {
  at::manual_seed(4);
  const auto y = at::randn({2, 7, 6}).requires_grad_(true);
  const auto out = y * 1.5;  // a block's output
  const auto txt = out.narrow(1, 0, 3);
  const auto img = out.narrow(1, 3, 4);
  const auto joined = dit::joinedTokens(txt, img);
  EXPECT_TRUE(joined.is_same(out));
  const auto g = at::randn({2, 7, 6});
  (joined * g).sum().backward();
  EXPECT_TRUE(allClose(y.grad(), g * 1.5, 1e-6, 1e-6));
  // Anything else is the copy: swapped halves, a gap, overlapping halves, separate tensors,
  // a strided base.
  const auto a = at::randn({2, 3, 6});
  const auto b = at::randn({2, 4, 6});
  const auto strided = at::randn({2, 6, 7}).transpose(1, 2);  // [2, 7, 6], not contiguous
  const std::vector<std::pair<at::Tensor, at::Tensor>> others = {{out.narrow(1, 4, 3), out.narrow(1, 0, 4)},
                                                                 {out.narrow(1, 0, 2), out.narrow(1, 3, 4)},
                                                                 {out.narrow(1, 0, 3), out.narrow(1, 2, 4)},
                                                                 {a, b},
                                                                 {strided.narrow(1, 0, 3), strided.narrow(1, 3, 4)}};
  for (const auto& [t, i] : others) {
    const auto j = dit::joinedTokens(t, i);
    EXPECT_FALSE(j.is_same(out));
    EXPECT_TRUE(allClose(j, at::cat({t, i}, 1), 0, 0));
  }
}

// Halves autograd does not reach the base through (a custom Function's outputs), and any
// halves with the fused paths off, are the concatenation; the gradient reaches the input.
TEST(FluxOps, JoinedTokensConcatenatesHalvesWhoseGradientGoesElsewhere) {
  at::manual_seed(5);
  const auto x = at::randn({2, 7, 6}).requires_grad_(true);
  const auto halves = HalvesOfACopy::apply(x);
  ASSERT_TRUE(halves[0].is_view() && halves[0]._base().is_same(halves[1]._base()));
  const auto joined = dit::joinedTokens(halves[0], halves[1]);
  EXPECT_FALSE(joined.is_same(at::Tensor(halves[0]._base())));
  const auto g = at::randn({2, 7, 6});
  (joined * g).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(allClose(x.grad(), g * 2, 1e-6, 1e-6));

  const auto out = at::randn({2, 7, 6}) * 1.0;
  nn::setFusedPaths(false);
  const auto off = dit::joinedTokens(out.narrow(1, 0, 3), out.narrow(1, 3, 4));
  nn::setFusedPaths(true);
  EXPECT_FALSE(off.is_same(out));
  EXPECT_TRUE(allClose(off, out, 0, 0));
}

// A FLUX single block's output, as the next single block receives it, is taken whole (in
// grad mode and without), and two chained blocks give the same values and input gradients
// as with the concatenation (the fused paths off).
TEST(FluxOps, ASingleBlocksOutputIsTheNextOnesInputWhole) {
  const auto cfg = flux::FluxConfig::tiny();
  at::manual_seed(6);
  const auto first = std::make_shared<flux::FluxSingleBlock>(cfg, flux::FluxBuildOptions{});
  const auto second = std::make_shared<flux::FluxSingleBlock>(cfg, flux::FluxBuildOptions{});
  nn::BlockIO io;
  io.img = at::randn({2, 16, cfg.hiddenSize()});
  io.txt = at::randn({2, 6, cfg.hiddenSize()});
  io.temb = at::randn({2, cfg.hiddenSize()});
  std::tie(io.ropeCos, io.ropeSin) =
      flux::rotaryFromIds(at::cat({flux::textIds(6), flux::imageIds(8, 8)}, 0), cfg.axesDimsRope, cfg.ropeTheta);
  auto run = [&](bool fused) {
    nn::setFusedPaths(fused);
    nn::BlockIO in = io;
    in.img = io.img.clone().requires_grad_(true);
    in.txt = io.txt.clone().requires_grad_(true);
    const auto mid = first->forward(in);
    const bool whole = dit::joinedTokens(mid.txt, mid.img).is_same(at::Tensor(mid.txt._base()));
    const auto out = second->forward(mid);
    (out.img.square().sum() + out.txt.square().sum()).backward();
    nn::setFusedPaths(true);
    return std::make_tuple(whole, out.img.detach(), in.img.grad(), in.txt.grad());
  };
  const auto [whole, img, gImg, gTxt] = run(true);
  const auto [wholeOff, imgOff, gImgOff, gTxtOff] = run(false);
  EXPECT_TRUE(whole);
  EXPECT_FALSE(wholeOff);
  EXPECT_TRUE(allClose(img, imgOff, 1e-6, 1e-6));
  EXPECT_TRUE(allClose(gImg, gImgOff, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(gTxt, gTxtOff, 1e-5, 1e-5));
  at::NoGradGuard noGrad;  // the checkpointed forward's first pass
  const auto mid = first->forward(io);
  EXPECT_TRUE(dit::joinedTokens(mid.txt, mid.img).is_same(at::Tensor(mid.txt._base())));
}

// splitAlong's parts are narrows of x; their gradients reach x as plain narrows' do
// (a part nothing used gets zeros), in one concatenation.
TEST(FluxOps, SplitAlongGivesTheNarrowsAndTheirGradients) {
  at::manual_seed(5);
  for (const int64_t dim : {int64_t{-1}, int64_t{1}}) {
    const auto x = at::randn({2, 13, 13});
    const std::vector<int64_t> sizes = {3, 4, 6};
    const auto xs = x.clone().requires_grad_(true);
    const auto parts = dit::splitAlong(xs, dim, sizes);
    ASSERT_EQ(parts.size(), 3u);
    const auto xr = x.clone().requires_grad_(true);
    std::vector<at::Tensor> ref;
    int64_t offset = 0;
    for (const int64_t n : sizes) {
      ref.push_back(xr.narrow(dim, offset, n));
      offset += n;
    }
    offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_TRUE(parts[i].equal(ref[i]));
      EXPECT_EQ(parts[i].data_ptr(), xs.narrow(dim, offset, sizes[i]).data_ptr());  // views
      offset += sizes[i];
    }
    // The middle part unused; the others weighted differently.
    const auto g0 = at::randn(parts[0].sizes());
    const auto g2 = at::randn(parts[2].sizes());
    ((parts[0] * g0).sum() + (parts[2] * parts[2] * g2).sum()).backward();
    ((ref[0] * g0).sum() + (ref[2] * ref[2] * g2).sum()).backward();
    EXPECT_TRUE(xs.grad().equal(xr.grad()));
    EXPECT_TRUE(xs.grad().narrow(dim, 3, 4).eq(0).all().item<bool>());
  }
  EXPECT_THROW(dit::splitAlong(at::randn({2, 5}), -1, {2, 2}), Error);  // parts of 4 along a dim of 5
  at::NoGradGuard noGrad;
  const auto y = at::randn({4, 6}).requires_grad_(true);
  const auto plain = dit::splitAlong(y, 0, {1, 3});
  EXPECT_TRUE(plain[1].equal(y.narrow(0, 1, 3)));
}

// swiglu is silu(gate) * up over x = [gate | up], with the same gradient as those two
// ATen ops, bit for bit, in float32 and bf16, for a contiguous x and a narrow of a wider one.
TEST(FluxOps, SwigluIsSiluOfTheGateTimesUpWithTheSameGradient) {
  at::manual_seed(6);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool narrowed : {false, true}) {
      const auto wide = (at::randn({3, 7, narrowed ? 30 : 10}) * 3).to(dtype);
      auto xOf = [&](const at::Tensor& w) { return narrowed ? w.narrow(-1, 11, 10) : w; };
      const auto ws = wide.clone().requires_grad_(true);
      const auto out = dit::swiglu(xOf(ws));
      const auto wr = wide.clone().requires_grad_(true);
      const auto halves = xOf(wr).chunk(2, -1);
      const auto ref = at::silu(halves[0]) * halves[1];
      ASSERT_EQ(out.sizes(), ref.sizes());
      EXPECT_TRUE(out.equal(ref));
      const auto g = at::randn(out.sizes()).to(dtype);
      out.backward(g);
      ref.backward(g);
      EXPECT_TRUE(ws.grad().equal(wr.grad())) << c10::toString(dtype) << (narrowed ? ", narrowed" : "");
    }
  }
  EXPECT_THROW(dit::swiglu(at::randn({2, 5}).requires_grad_(true)), Error);  // no (gate, up) pair
}
