// The fused paths of nn::Linear (docs/speed.md, "built, not yet measured"): each gives the
// unfused path's values and gradients and keeps less for the backward. Adapters here are
// local (nn tests link no lora/); tests/lora checks the LoRA side of each fusion.
#include <gtest/gtest.h>
#include <c10/util/intrusive_ptr.h>

#include "common/Error.h"
#include "common/FusedPaths.h"
#include "common/TestSupport.h"
#include "nn/GradLayout.h"
#include "nn/Linear.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::nn;
using strata::test::allClose;
using strata::test::FusedPathsAs;

namespace {

// Whether anything still holds the storage of a tensor we let go of.
c10::weak_intrusive_ptr<c10::StorageImpl> weakStorage(const at::Tensor& t) { return t.storage().getWeakStorageImpl(); }

// Adds x A^T B^T with float32 masters through plain autograd (no addToGeluParts / siblingAdd).
class TinyAdapter : public LinearAdapter {
 public:
  TinyAdapter(int64_t in, int64_t out, int64_t rank)
      : down((at::randn({rank, in}) * 0.1).requires_grad_(true)),
        up((at::randn({out, rank}) * 0.1).requires_grad_(true)) {}
  at::Tensor delta(const at::Tensor& x, const at::Tensor&) override {
    return at::linear(at::linear(x.to(at::kFloat), down), up).to(x.scalar_type());
  }
  at::Tensor down, up;
};

// Records the gradients its input receives, in the order they arrive.
struct GradProbe : torch::autograd::Function<GradProbe> {
  static std::vector<at::Tensor> grads;
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    grads.push_back(g[0]);
    return {g[0]};
  }
};
std::vector<at::Tensor> GradProbe::grads;

}  // namespace

// O laid out [B, N, H, Dh] and seen as [B, H, N, Dh] (as SDPA returns it); its gradient
// arrives as a narrow of a wider one (a concatenation's backward). Without the identity the
// probe (where SDPA's backward would be) sees the narrow's strides; with it, O's.
TEST(GradLayout, GradientReachesTheProducerInItsOutputLayout) {
  const auto x = at::randn({2, 5, 3, 4}).requires_grad_(true);  // [B, N, H, Dh]
  // With the fused paths off too: the identity is a correctness guard, not a speed path.
  for (const bool fused : {true, false}) {
    setFusedPaths(fused);
    for (const bool laidOut : {true, false}) {
      GradProbe::grads.clear();
      const auto o = GradProbe::apply(x).transpose(1, 2);  // [B, H, N, Dh], strides of [B, N, H, Dh]
      const auto laid = laidOut ? gradInLayoutOf(o) : o;
      const auto flat = laid.transpose(1, 2).flatten(2);            // [B, N, 12]
      const auto wide = at::cat({flat, at::randn({2, 5, 7})}, -1);  // [B, N, 19]
      const auto g = at::randn({2, 5, 19});
      (wide * g).sum().backward();
      // the probe sits before the transpose: O's strides there are [B, N, H, Dh]'s contiguous ones
      const std::vector<int64_t> contiguous{60, 12, 4, 1};
      ASSERT_EQ(GradProbe::grads.size(), 1u);
      if (laidOut)
        EXPECT_EQ(GradProbe::grads[0].strides().vec(), contiguous);
      else
        EXPECT_NE(GradProbe::grads[0].strides().vec(), contiguous);  // the narrow's row stride of 19 comes through
      EXPECT_TRUE(allClose(x.grad(), g.narrow(-1, 0, 12).reshape({2, 5, 3, 4}), 0, 0));
      x.mutable_grad() = at::Tensor();
    }
  }
  setFusedPaths(true);
  // Already in O's layout: the incoming gradient is handed on, not copied.
  GradProbe::grads.clear();
  const auto o = GradProbe::apply(x);
  const auto g = at::randn({2, 5, 3, 4});
  gradInLayoutOf(o).backward(g);
  ASSERT_EQ(GradProbe::grads.size(), 1u);
  EXPECT_EQ(GradProbe::grads[0].data_ptr(), g.data_ptr());
  // No gradient needed, or an expanded x: x itself.
  const auto plain = at::randn({3, 4});
  EXPECT_TRUE(gradInLayoutOf(plain).is_same(plain));
  const auto expanded = at::randn({1, 4}).requires_grad_(true).expand({3, 4});
  EXPECT_TRUE(gradInLayoutOf(expanded).is_same(expanded));
}

// An int8 base over column parts: the same output and part gradients as the concatenated
// input (fused paths off), every part gradient its own contiguous tensor (not a narrow of
// one [M, in] gradient), and the parts themselves not kept by the base for the backward.
TEST(FusedPaths, QuantizedForwardPartsSplitsByColumnsLikeTheConcatenation) {
  at::manual_seed(3);
  for (const bool withBias : {true, false}) {
    Linear lin(40, 24, withBias);
    lin->quantize(QuantType::Int8);
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      for (const int64_t split : {int64_t{1}, int64_t{16}, int64_t{39}}) {
        const auto p0 = at::randn({2, 3, split}).to(dtype).requires_grad_(true);
        const auto p1 = at::randn({2, 3, 40 - split}).to(dtype).requires_grad_(true);
        const auto g = at::randn({2, 3, 24}).to(dtype);
        at::Tensor ref, refG0, refG1;
        {
          FusedPathsAs off(false);
          GradProbe::grads.clear();
          ref = lin->forwardParts({GradProbe::apply(p0), GradProbe::apply(p1)});
          (ref * g).sum().backward();
          refG0 = p0.grad().clone();
          refG1 = p1.grad().clone();
          p0.mutable_grad() = at::Tensor();
          p1.mutable_grad() = at::Tensor();
          // the concatenation's backward hands the parts narrows of one [M, 40] gradient
          ASSERT_EQ(GradProbe::grads.size(), 2u);
          EXPECT_FALSE(GradProbe::grads[0].is_contiguous() && GradProbe::grads[1].is_contiguous());
        }
        GradProbe::grads.clear();
        const auto out = lin->forwardParts({GradProbe::apply(p0), GradProbe::apply(p1)});
        (out * g).sum().backward();
        ASSERT_EQ(GradProbe::grads.size(), 2u);
        EXPECT_TRUE(GradProbe::grads[0].is_contiguous() && GradProbe::grads[1].is_contiguous());
        // float32: the order of the sums; bf16: one more rounding of the partial sum
        const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
        EXPECT_TRUE(allClose(out.to(at::kFloat), ref.to(at::kFloat), tol, tol)) << split;
        EXPECT_TRUE(allClose(p0.grad().to(at::kFloat), refG0.to(at::kFloat), tol, tol)) << split;
        EXPECT_TRUE(allClose(p1.grad().to(at::kFloat), refG1.to(at::kFloat), tol, tol)) << split;
      }
    }
    // Against the float weights: forwardParts(parts) is forward(cat(parts)).
    const auto a = at::randn({4, 10});
    const auto b = at::randn({4, 30});
    EXPECT_TRUE(allClose(lin->forwardParts({a, b}), lin->forward(at::cat({a, b}, -1)), 1e-5, 1e-5));
  }
  // The parts are not kept: dropped after the forward, their storage is freed.
  Linear lin(40, 24);
  lin->quantize(QuantType::Int8);
  auto p0 = at::randn({2, 3, 10}).requires_grad_(true);
  auto p1 = at::randn({2, 3, 30}).requires_grad_(true);
  auto a0 = p0 * 2;  // non-leaf parts, as activations are
  auto a1 = p1 * 2;
  const auto w0 = weakStorage(a0);
  const auto w1 = weakStorage(a1);
  const auto out = lin->forwardParts({a0, a1});
  a0 = at::Tensor();
  a1 = at::Tensor();
  EXPECT_TRUE(w0.expired());
  EXPECT_TRUE(w1.expired());
  out.sum().backward();
  EXPECT_TRUE(p0.grad().defined() && p1.grad().defined());
}

// forwardGelu(pre) is forward(gelu_tanh(pre)) and forwardParts with a GELU part is
// forwardParts with the GELU applied first: values and gradients (of pre, the other part
// and an adapter that has no GELU path of its own), float and int8 bases.
TEST(FusedPaths, GeluPartEqualsTheGeluAppliedFirst) {
  at::manual_seed(4);
  for (const bool quantized : {false, true}) {
    Linear lin(32, 12);
    if (quantized) lin->quantize(QuantType::Int8);
    auto adapter = std::make_shared<TinyAdapter>(32, 12, 3);
    lin->addAdapter(adapter);
    const auto pre = at::randn({2, 4, 32}).requires_grad_(true);
    const auto g = at::randn({2, 4, 12});
    (lin->forwardGelu(pre) * g).sum().backward();
    const auto gotPre = pre.grad().clone();
    const auto gotDown = adapter->down.grad().clone();
    pre.mutable_grad() = at::Tensor();
    adapter->down.mutable_grad() = at::Tensor();
    (lin->forward(at::gelu(pre, "tanh")) * g).sum().backward();
    EXPECT_TRUE(allClose(gotPre, pre.grad(), 1e-6, 1e-6));
    EXPECT_TRUE(allClose(gotDown, adapter->down.grad(), 1e-6, 1e-6));
    pre.mutable_grad() = at::Tensor();

    const auto a = at::randn({2, 4, 8}).requires_grad_(true);
    const auto m = at::randn({2, 4, 24}).requires_grad_(true);
    const auto y = lin->forwardParts({a, m}, 1);
    (y * g).sum().backward();
    const auto ga = a.grad().clone();
    const auto gm = m.grad().clone();
    a.mutable_grad() = at::Tensor();
    m.mutable_grad() = at::Tensor();
    at::Tensor ref;
    {
      FusedPathsAs off(false);
      ref = lin->forwardParts({a, at::gelu(m, "tanh")});
      (ref * g).sum().backward();
    }
    EXPECT_TRUE(allClose(y, ref, 1e-5, 1e-5));
    EXPECT_TRUE(allClose(ga, a.grad(), 1e-5, 1e-5));
    EXPECT_TRUE(allClose(gm, m.grad(), 1e-5, 1e-5));
  }
  Linear lin(8, 4);
  EXPECT_THROW(lin->forwardParts({at::randn({2, 8})}, 1), Error);
}

// A frozen base does not keep its input for the backward (only W is needed): what lets
// forwardGelu drop the GELU output once the adapters keep the pre-activation instead.
TEST(FusedPaths, FrozenBaseKeepsNotItsInput) {
  Linear lin(16, 8);
  for (auto& p : lin->parameters()) p.requires_grad_(false);
  const auto pre = at::randn({3, 16}).requires_grad_(true);
  auto act = at::gelu(pre, "tanh");
  const auto weak = weakStorage(act);
  const auto y = lin->forwardBase(act);
  act = at::Tensor();
  EXPECT_TRUE(weak.expired());
  y.sum().backward();
  EXPECT_TRUE(pre.grad().defined());
}

// forwardSiblings is each Linear's forward when no adapter fuses (none, two on one Linear,
// adapters without a siblingAdd), and refuses an input of the wrong width.
TEST(FusedPaths, ForwardSiblingsWithoutFusionIsEachForward) {
  at::manual_seed(5);
  Linear q(16, 8), k(16, 8), v(16, 4, false);
  auto a0 = std::make_shared<TinyAdapter>(16, 8, 2);
  auto a1 = std::make_shared<TinyAdapter>(16, 8, 2);
  auto a2 = std::make_shared<TinyAdapter>(16, 8, 2);
  q->addAdapter(a0);
  k->addAdapter(a1);
  k->addAdapter(a2);
  const auto x = at::randn({2, 3, 16});
  const auto out = forwardSiblings({q.get(), k.get(), v.get()}, x);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(allClose(out[0], q->forward(x), 0, 0));
  EXPECT_TRUE(allClose(out[1], k->forward(x), 0, 0));
  EXPECT_TRUE(allClose(out[2], v->forward(x), 0, 0));
  EXPECT_THROW(forwardSiblings({q.get(), k.get()}, at::randn({2, 15})), Error);
  EXPECT_THROW(forwardSiblings({q.get(), nullptr}, x), Error);
}
