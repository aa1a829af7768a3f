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

namespace {

// q, k, v of widths 8, 8, 4 over 16 inputs (biases or not), frozen, each with a TinyAdapter.
struct Siblings {
  Linear q, k, v;
  std::vector<std::shared_ptr<TinyAdapter>> adapters;
  explicit Siblings(bool bias) : q(16, 8, bias), k(16, 8, bias), v(16, 4, bias) {
    for (auto* l : linears()) {
      for (auto& p : l->parameters()) p.requires_grad_(false);
      adapters.push_back(std::make_shared<TinyAdapter>(16, l->outFeatures(), 2));
      l->addAdapter(adapters.back());
    }
  }
  std::vector<LinearImpl*> linears() { return {q.get(), k.get(), v.get()}; }
};

// forwardSiblings with fixed output gradients, backward: {outputs..., x's gradient, each
// adapter's down and up gradients}. `node`: whether the one-GEMM node is in q's graph.
std::vector<at::Tensor> siblingsStep(Siblings& s, const at::Tensor& x0, bool* node = nullptr) {
  const auto x = x0.clone().requires_grad_(true);
  const auto out = forwardSiblings(s.linears(), x);
  if (node) *node = strata::test::countGraphNodes(out[0], "SharedRowsMatmul") == 1;
  at::manual_seed(17);
  at::Tensor loss = at::zeros({});
  for (const auto& o : out) loss = loss + (o * at::randn(o.sizes())).sum();
  loss.backward();
  std::vector<at::Tensor> r;
  for (const auto& o : out) r.push_back(o.detach());
  r.push_back(x.grad());
  for (const auto& a : s.adapters) {
    r.push_back(a->down.grad().clone());
    r.push_back(a->up.grad().clone());
    a->down.mutable_grad() = at::Tensor();
    a->up.mutable_grad() = at::Tensor();
  }
  return r;
}

}  // namespace

// shareWeightRows puts q, k, v's weights and biases in one tensor: the same parameter
// objects, values and names, each a block of its rows in order; the old storages freed.
// forwardSiblings then multiplies x once (one node, the outputs aliasing one result) and
// gives each Linear's output, x's gradient and every adapter's gradients as three GEMMs
// do (float32, 1e-6), with and without biases.
TEST(SharedWeightRows, OneGemmEachWayEqualsThreeLinears) {
  for (const bool bias : {true, false}) {
    at::manual_seed(3);
    Siblings s(bias);
    const auto x = at::randn({2, 3, 16});
    bool node = true;
    const auto ref = siblingsStep(s, x, &node);
    EXPECT_FALSE(node);
    std::vector<at::Tensor> before;
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> oldStorages;
    std::vector<const c10::TensorImpl*> impls;
    for (auto* l : s.linears())
      for (const auto& p : l->named_parameters()) {
        before.push_back(p.value().clone());
        oldStorages.push_back(weakStorage(p.value()));
        impls.push_back(p.value().unsafeGetTensorImpl());
      }
    EXPECT_FALSE(sharesWeightRows(s.linears()));
    ASSERT_TRUE(shareWeightRows(s.linears()));
    EXPECT_TRUE(sharesWeightRows(s.linears()));
    EXPECT_TRUE(shareWeightRows(s.linears()));  // already shared: nothing to do
    size_t i = 0;
    for (auto* l : s.linears()) {
      EXPECT_EQ(l->named_parameters().keys(),
                (bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"}));
      for (const auto& p : l->named_parameters()) {
        EXPECT_EQ(p.value().unsafeGetTensorImpl(), impls[i]) << p.key();
        EXPECT_TRUE(allClose(p.value(), before[i], 0, 0)) << p.key();
        EXPECT_TRUE(oldStorages[i].expired()) << p.key() << ": its old storage is still held";
        EXPECT_FALSE(p.value().is_view());
        ++i;
      }
    }
    EXPECT_EQ(s.k->weight.storage_offset(), 8 * 16);
    EXPECT_EQ(s.v->weight.storage_offset(), 16 * 16);
    const auto got = siblingsStep(s, x, &node);
    EXPECT_TRUE(node) << "q, k, v were not one GEMM";
    ASSERT_EQ(got.size(), ref.size());
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_LE(strata::test::relL2(got[j], ref[j]), 1e-6) << (bias ? "bias " : "") << "result " << j;
    // Without autograd (inference) and without adapters: the same values, the outputs parts
    // of one result.
    at::NoGradGuard noGrad;
    for (auto* l : s.linears()) l->removeAdapter(l->adapters().at(0).get());
    const auto plain = forwardSiblings(s.linears(), x);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(plain[j].storage().unsafeGetStorageImpl(), plain[0].storage().unsafeGetStorageImpl()) << j;
      EXPECT_LE(strata::test::relL2(plain[j], s.linears()[j]->forwardBase(x)), 1e-6) << j;
    }
  }
}

// A gradient that reaches only some of the outputs (v unused) still gives x's.
TEST(SharedWeightRows, AnUnusedOutputGetsNoGradientAndXsIsRight) {
  at::manual_seed(4);
  Siblings s(true);
  const auto x0 = at::randn({3, 16});
  at::Tensor gx[2];
  for (const bool shared : {false, true}) {
    if (shared) ASSERT_TRUE(shareWeightRows(s.linears()));
    const auto x = x0.clone().requires_grad_(true);
    const auto out = forwardSiblings(s.linears(), x);
    (out[0].sum() + 2 * out[1].sum()).backward();
    gx[shared] = x.grad();
  }
  EXPECT_LE(strata::test::relL2(gx[1], gx[0]), 1e-6);
}

// Fallbacks: the fused paths off, a Linear quantized or moved to another dtype after the
// sharing (it has its own storage again; the others still share), or Linears that cannot share (a weight that trains,
// another input width, a quantized one) give each Linear's own forward, and shareWeightRows
// refuses the last ones without changing anything.
TEST(SharedWeightRows, FallsBackWhereTheRowsAreNotShared) {
  at::manual_seed(6);
  const auto x = at::randn({2, 3, 16});
  auto expectEachForward = [&](Siblings& s, const std::string& what, bool qkShared = false) {
    bool node = !qkShared;
    const auto got = siblingsStep(s, x, &node);
    EXPECT_EQ(node, qkShared) << what;
    auto ls = s.linears();
    for (size_t j = 0; j < 3; ++j) EXPECT_LE(strata::test::relL2(got[j], ls[j]->forward(x)), 1e-6) << what << " " << j;
  };
  {
    Siblings s(true);
    ASSERT_TRUE(shareWeightRows(s.linears()));
    FusedPathsAs off(false);
    expectEachForward(s, "fused paths off");
  }
  {
    Siblings s(true);
    ASSERT_TRUE(shareWeightRows(s.linears()));
    s.k->quantize(QuantType::Int8);
    EXPECT_FALSE(sharesWeightRows(s.linears()));
    expectEachForward(s, "k quantized");
  }
  {
    Siblings s(false);
    ASSERT_TRUE(shareWeightRows(s.linears()));
    s.v->to(at::kDouble);
    s.v->to(at::kFloat);
    EXPECT_FALSE(sharesWeightRows(s.linears()));
    EXPECT_TRUE(sharesWeightRows({s.q.get(), s.k.get()}));
    expectEachForward(s, "v moved and back (q, k still one GEMM)", true);
  }
  {
    Siblings s(true);
    s.q->weight.requires_grad_(true);
    const auto storage = s.q->weight.storage().unsafeGetStorageImpl();
    EXPECT_FALSE(shareWeightRows(s.linears()));
    EXPECT_EQ(s.q->weight.storage().unsafeGetStorageImpl(), storage);
  }
  {
    Siblings s(true);
    Linear wide(17, 8);
    for (auto& p : wide->parameters()) p.requires_grad_(false);
    EXPECT_FALSE(shareWeightRows({s.q.get(), wide.get()}));
    s.v->quantize(QuantType::Int8);
    EXPECT_FALSE(shareWeightRows(s.linears()));
    EXPECT_TRUE(shareWeightRows({s.q.get(), s.k.get()}));  // the two float ones may
    EXPECT_FALSE(shareWeightRows({s.q.get()}));
  }
}

// A load writes a shared weight in place (DitCheckpoint's copy_): the one GEMM reads the
// new values, as each Linear's own forward does.
TEST(SharedWeightRows, ALoadsCopyLandsInTheSharedTensor) {
  at::manual_seed(8);
  Siblings s(true);
  ASSERT_TRUE(shareWeightRows(s.linears()));
  {
    at::NoGradGuard noGrad;
    s.k->weight.copy_(at::randn({8, 16}));
    s.v->bias.copy_(at::randn({4}));
  }
  EXPECT_TRUE(sharesWeightRows(s.linears()));
  const auto x = at::randn({2, 3, 16});
  bool node = false;
  const auto got = siblingsStep(s, x, &node);
  EXPECT_TRUE(node);
  auto ls = s.linears();
  for (size_t j = 0; j < 3; ++j) EXPECT_LE(strata::test::relL2(got[j], ls[j]->forward(x)), 1e-6) << j;
}
