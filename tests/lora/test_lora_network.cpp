// LoRA adapter and network on a tiny random FLUX: targets, parameters outside the
// model's key set, multiplier (scalar, per sample), attach/detach, merge/unmerge,
// state dict and placement attachments.
#include <gtest/gtest.h>

#include <set>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "lora/LoraNetwork.h"
#include "lora/LoraTargets.h"
#include "LoraTestSupport.h"

using namespace strata;
using namespace strata::lora;
using strata::lora::test::randomizeUps;
using strata::lora::test::TinyFlux;

namespace {

std::set<std::string> adapterPaths(const LoraNetwork& net) {
  std::set<std::string> out;
  for (const auto& a : net.adapters()) out.insert(a->hostPath());
  return out;
}

std::set<std::string> parameterKeys(torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters(true)) out.insert(p.key());
  return out;
}

LoraConfig config(int64_t rank, double alpha, std::vector<std::string> targets = {}) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.targetModules = std::move(targets);
  return c;
}

}  // namespace

TEST(LoraTargets, PlainNamesFollowPeftSuffixRule) {
  EXPECT_TRUE(LoraTargets::patternMatches("to_q", "transformer_blocks.0.attn.to_q"));
  EXPECT_FALSE(LoraTargets::patternMatches("to_q", "transformer_blocks.0.attn.add_to_q"));
  EXPECT_TRUE(LoraTargets::patternMatches("proj_out", "proj_out"));
  EXPECT_TRUE(LoraTargets::patternMatches("proj_out", "single_transformer_blocks.1.proj_out"));
  EXPECT_TRUE(LoraTargets::patternMatches("norm.linear", "single_transformer_blocks.1.norm.linear"));
  EXPECT_FALSE(LoraTargets::patternMatches("norm.linear", "transformer_blocks.1.norm1.linear"));
  EXPECT_TRUE(
      LoraTargets::patternMatches("single_transformer_blocks.*.proj_mlp", "single_transformer_blocks.3.proj_mlp"));
  EXPECT_FALSE(
      LoraTargets::patternMatches("single_transformer_blocks.?.proj_mlp", "single_transformer_blocks.13.proj_mlp"));
  EXPECT_TRUE(LoraTargets::patternMatches("re:transformer_blocks\\.[0-9]+\\.attn\\.to_[qkv]",
                                          "transformer_blocks.12.attn.to_v"));
  EXPECT_FALSE(LoraTargets::patternMatches("re:attn\\.to_q", "transformer_blocks.0.attn.to_q"));  // whole path
  EXPECT_THROW(LoraTargets({"re:([unclosed"}), ConfigError);
}

TEST(LoraNetwork, DefaultTargetsAreEveryLinearInsideTheBlocks) {
  TinyFlux f;
  const auto keysBefore = parameterKeys(*f.model);
  auto net = LoraNetwork::create(*f.model, config(4, 4), f.rules);
  std::set<std::string> expected;
  for (const auto& [path, linear] : f.model->linears())
    if (path.rfind("transformer_blocks.", 0) == 0 || path.rfind("single_transformer_blocks.", 0) == 0)
      expected.insert(path);
  // 14 Linears per double block, 6 per single block.
  EXPECT_EQ(expected.size(), static_cast<size_t>(14 * f.cfg.numLayers + 6 * f.cfg.numSingleLayers));
  EXPECT_EQ(adapterPaths(*net), expected);
  EXPECT_EQ(net->adapter("proj_out"), nullptr);
  EXPECT_EQ(net->adapter("x_embedder"), nullptr);
  // Adapters are not children of their hosts: the checkpoint key set is unchanged.
  EXPECT_EQ(parameterKeys(*f.model), keysBefore);
}

TEST(LoraNetwork, ManifestStyleTargetsIncludeTopLevelProjOut) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(4, 4, {"to_q", "proj_out", "norm.linear"}), f.rules);
  const auto paths = adapterPaths(*net);
  EXPECT_TRUE(paths.count("proj_out"));
  EXPECT_TRUE(paths.count("single_transformer_blocks.0.proj_out"));
  EXPECT_TRUE(paths.count("single_transformer_blocks.0.norm.linear"));
  EXPECT_TRUE(paths.count("transformer_blocks.1.attn.to_q"));
  EXPECT_FALSE(paths.count("transformer_blocks.0.norm1.linear"));
  EXPECT_EQ(paths.size(),
            static_cast<size_t>(1 + 2 * f.cfg.numSingleLayers + (f.cfg.numLayers + f.cfg.numSingleLayers)));
  LoraConfig c = config(4, 4);
  c.excludeModules = {"re:.*norm.*"};
  auto excluded = LoraNetwork::create(*f.model, c, f.rules);
  for (const auto& p : adapterPaths(*excluded)) EXPECT_EQ(p.find("norm"), std::string::npos) << p;
}

TEST(LoraNetwork, NoMatchingTargetIsAConfigError) {
  TinyFlux f;
  EXPECT_THROW(LoraNetwork::create(*f.model, config(4, 4, {"no_such_layer"}), f.rules), ConfigError);
  EXPECT_THROW(LoraNetwork::create(*f.model, config(0, 4), f.rules), ConfigError);
}

TEST(LoraAdapter, InitShapesDtypeAndZeroDelta) {
  TinyFlux f;
  const auto base = f.forward();
  auto net = LoraNetwork::create(*f.model, config(4, 8), f.rules);
  const auto a = net->adapter("transformer_blocks.0.attn.to_q");
  ASSERT_NE(a, nullptr);
  const int64_t hidden = f.cfg.hiddenSize();
  EXPECT_EQ(a->down.sizes(), (std::vector<int64_t>{4, hidden}));
  EXPECT_EQ(a->up.sizes(), (std::vector<int64_t>{hidden, 4}));
  EXPECT_EQ(a->down.scalar_type(), at::kFloat);
  EXPECT_EQ(a->up.abs().max().item<double>(), 0.0);
  // kaiming-uniform(a = sqrt 5) on [r, in]: bound 1/sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  EXPECT_LE(a->down.abs().max().item<double>(), bound + 1e-7);
  EXPECT_GT(a->down.abs().max().item<double>(), 0.5 * bound);
  EXPECT_DOUBLE_EQ(a->scale(), 2.0);
  EXPECT_TRUE(a->down.requires_grad());
  EXPECT_EQ(net->parameters().size(), 2 * net->adapters().size());
  // Up = 0: the model's output does not change.
  EXPECT_TRUE(strata::test::allClose(f.forward(), base, 0, 0));
  // Computed in the activation dtype, master weights stay float32.
  const auto xBf16 = at::randn({2, 3, hidden}).to(at::kBFloat16);
  EXPECT_EQ(a->delta(xBf16, at::Tensor()).scalar_type(), at::kBFloat16);
  EXPECT_EQ(a->down.scalar_type(), at::kFloat);
}

// network.dtype bf16: the weights, and so their gradients, are bfloat16; computed in the
// activations' dtype they give what float32 weights holding the same values give, and
// the gradients are those rounded to bfloat16.
TEST(LoraNetwork, BfloatWeightsGiveTheFloatNetworksOutputAndRoundedGradients) {
  TinyFlux f32, f16;  // the same base (seed 7)
  auto cfg = config(4, 8);
  at::manual_seed(3);
  auto reference = LoraNetwork::create(*f32.model, cfg, f32.rules);
  cfg.dtype = at::kBFloat16;
  at::manual_seed(3);
  auto bf16 = LoraNetwork::create(*f16.model, cfg, f16.rules);
  randomizeUps(*bf16);
  ASSERT_EQ(reference->adapters().size(), bf16->adapters().size());
  for (size_t i = 0; i < bf16->adapters().size(); ++i) {
    const auto& a = bf16->adapters()[i];
    const auto& r = reference->adapters()[i];
    EXPECT_EQ(a->down.scalar_type(), at::kBFloat16) << a->hostPath();
    EXPECT_EQ(a->up.scalar_type(), at::kBFloat16) << a->hostPath();
    EXPECT_TRUE(a->down.requires_grad());
    // The same draw, rounded.
    EXPECT_TRUE(strata::test::allClose(a->down, r->down.to(at::kBFloat16), 0, 0)) << a->hostPath();
    r->setWeights(a->down, a->up);  // float32 weights holding the bf16 values
    EXPECT_EQ(r->down.scalar_type(), at::kFloat);
    EXPECT_EQ(a->deltaWeight().scalar_type(), at::kFloat);
    EXPECT_TRUE(strata::test::allClose(a->deltaWeight(), r->deltaWeight(), 0, 0)) << a->hostPath();
  }
  for (auto* n : {reference.get(), bf16.get()}) n->train(true);
  const auto out32 = f32.model->forward(f32.inputs);
  const auto out16 = f16.model->forward(f16.inputs);
  EXPECT_EQ(out16.scalar_type(), at::kFloat);
  EXPECT_TRUE(strata::test::allClose(out16, out32, 1e-6, 1e-5));
  out32.pow(2).mean().backward();
  out16.pow(2).mean().backward();
  double largest = 0;
  for (size_t i = 0; i < bf16->adapters().size(); ++i) {
    const auto& a = bf16->adapters()[i];
    const auto& r = reference->adapters()[i];
    for (const auto& [g, want] : {std::pair{a->down.grad(), r->down.grad()}, {a->up.grad(), r->up.grad()}}) {
      ASSERT_TRUE(g.defined()) << a->hostPath();
      EXPECT_EQ(g.scalar_type(), at::kBFloat16) << a->hostPath();
      // bf16 keeps 8 bits of mantissa: within 2^-8 of each value, plus a little for the
      // bf16 products the fused backward sums.
      EXPECT_TRUE(strata::test::allClose(g.to(at::kFloat), want, 1e-6, 1e-2)) << a->hostPath();
      largest = std::max(largest, want.abs().max().item<double>());
    }
  }
  EXPECT_GT(largest, 0.0);
  // A dtype LoRA weights are not trained in is refused by name.
  cfg.dtype = at::kHalf;
  TinyFlux other;
  try {
    LoraNetwork::create(*other.model, cfg, other.rules);
    ADD_FAILURE() << "float16 weights were accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("network.dtype"), std::string::npos) << e.what();
  }
}

// The base must be frozen by the network itself: a caller that forgets to freeze
// it would otherwise get base-weight gradients (the model's size again per card).
TEST(LoraNetwork, CreateFreezesTheBaseAndOnlyAdaptersGetGradients) {
  TinyFlux f;
  for (auto& p : f.model->parameters()) p.set_requires_grad(true);  // as a fresh model comes
  auto net = LoraNetwork::create(*f.model, config(4, 8), f.rules);
  randomizeUps(*net);
  size_t adapterTensors = 0;
  for (const auto& p : net->parameters()) {
    EXPECT_TRUE(p.requires_grad());
    ++adapterTensors;
  }
  auto out = f.model->forward(f.inputs);
  out.square().mean().backward();
  size_t withGrad = 0;
  for (const auto& kv : f.model->named_parameters()) {
    const bool isAdapter = kv.key().find("lora") != std::string::npos;
    if (kv.value().grad().defined()) ++withGrad;
    if (!isAdapter) EXPECT_FALSE(kv.value().grad().defined()) << kv.key() << " (base) got a gradient";
  }
  for (const auto& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
  EXPECT_LE(withGrad, adapterTensors);
}

TEST(LoraAdapter, DeltaIsScaleTimesUpDownX) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(3, 6, {"proj_out"}), f.rules);
  randomizeUps(*net);
  const auto a = net->adapter("proj_out");
  const auto x = at::randn({2, 5, a->host()->inFeatures()});
  const auto expected = at::matmul(at::matmul(x, a->down.t()), a->up.t()) * 2.0;
  EXPECT_TRUE(strata::test::allClose(a->delta(x, at::Tensor()), expected, 1e-6, 1e-5));
  EXPECT_TRUE(strata::test::allClose(a->host()->forward(x), a->host()->forwardBase(x) + expected, 1e-6, 1e-5));
}

TEST(LoraNetwork, DetachAttachAndDestructionRestoreTheBase) {
  TinyFlux f;
  const auto base = f.forward();
  {
    auto net = LoraNetwork::create(*f.model, config(4, 4), f.rules);
    randomizeUps(*net);
    const auto withLora = f.forward();
    EXPECT_FALSE(strata::test::allClose(withLora, base, 1e-5, 0)) << "the LoRA must change the output";
    net->detach();
    EXPECT_TRUE(strata::test::allClose(f.forward(), base, 0, 0));
    net->attach();
    net->attach();  // idempotent
    EXPECT_TRUE(strata::test::allClose(f.forward(), withLora, 0, 0));
  }
  EXPECT_TRUE(strata::test::allClose(f.forward(), base, 0, 0)) << "a destroyed network leaves no adapter behind";
}

TEST(LoraNetwork, ScalarMultiplierScalesTheDelta) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(4, 4, {"proj_out"}), f.rules);
  randomizeUps(*net);
  const auto x = at::randn({2, 3, f.cfg.hiddenSize()});
  auto& host = *net->adapter("proj_out")->host();
  const auto full = host.forward(x) - host.forwardBase(x);
  net->setMultiplier(0.25);
  EXPECT_TRUE(strata::test::allClose(host.forward(x) - host.forwardBase(x), full * 0.25, 1e-6, 1e-5));
  net->setMultiplier(0.0);
  EXPECT_TRUE(strata::test::allClose(host.forward(x), host.forwardBase(x), 0, 0));
}

TEST(LoraNetwork, PerSampleMultiplierAppliesPerBatchItem) {
  TinyFlux f(/*batch=*/3);
  const auto base = f.forward();
  auto net = LoraNetwork::create(*f.model, config(4, 4), f.rules);
  randomizeUps(*net, 0.1);
  const auto full = f.forward();
  // CPU tensor [B]; moved to each adapter's output device where it is used.
  net->setMultiplier(at::tensor({0.0, 1.0, 0.0}, at::kDouble));
  EXPECT_TRUE(net->multiplier().isPerSample());
  const auto mixed = f.forward();
  EXPECT_TRUE(strata::test::allClose(mixed[0], base[0], 1e-6, 1e-5));
  EXPECT_TRUE(strata::test::allClose(mixed[1], full[1], 1e-6, 1e-5));
  EXPECT_TRUE(strata::test::allClose(mixed[2], base[2], 1e-6, 1e-5));
  EXPECT_FALSE(strata::test::allClose(mixed[1], base[1], 1e-5, 0));
  // A per-sample multiplier of the wrong batch size is an error, not a broadcast.
  net->setMultiplier(at::tensor({1.0, 1.0}));
  EXPECT_THROW(f.forward(), Error);
  EXPECT_THROW(net->setMultiplier(at::ones({2, 2})), Error);
  net->setMultiplier(1.0);
  EXPECT_TRUE(strata::test::allClose(f.forward(), full, 0, 0));
}

TEST(LoraNetwork, MergeEqualsAdapterForwardAndUnmergeRestoresTheBase) {
  TinyFlux f;
  std::map<std::string, at::Tensor> baseWeights;
  for (const auto& p : f.model->named_parameters(true)) baseWeights[p.key()] = p.value().clone();
  auto net = LoraNetwork::create(*f.model, config(4, 8), f.rules);
  randomizeUps(*net, 0.1);
  net->setMultiplier(0.5);
  const auto withLora = f.forward();
  net->merge();
  EXPECT_TRUE(net->merged());
  for (const auto& a : net->adapters()) EXPECT_TRUE(a->host()->adapters().empty()) << a->hostPath();
  EXPECT_TRUE(strata::test::allClose(f.forward(), withLora, 1e-5, 1e-4));
  net->merge();  // idempotent
  net->unmerge();
  EXPECT_FALSE(net->merged());
  EXPECT_TRUE(strata::test::allClose(f.forward(), withLora, 1e-5, 1e-4));
  for (const auto& p : f.model->named_parameters(true))
    EXPECT_TRUE(strata::test::allClose(p.value(), baseWeights.at(p.key()), 1e-6, 0)) << p.key();
  net->setMultiplier(at::ones({2}));
  EXPECT_THROW(net->merge(), Error);
}

TEST(LoraNetwork, StateDictUsesPeftNamesAndLoadIsStrict) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(4, 4, {"to_q"}), f.rules);
  const auto sd = net->stateDict("transformer.");
  ASSERT_EQ(sd.size(), 2 * net->adapters().size());
  std::map<std::string, at::Tensor> m;
  for (const auto& [k, v] : sd) m[k] = v.detach().clone();
  ASSERT_TRUE(m.count("transformer.transformer_blocks.0.attn.to_q.lora_A.weight"));
  ASSERT_TRUE(m.count("transformer.single_transformer_blocks.0.attn.to_q.lora_B.weight"));
  EXPECT_TRUE(sd.front().second.is_same(net->adapters().front()->down)) << "live parameters, not copies";

  std::map<std::string, at::Tensor> changed = m;
  for (auto& [k, v] : changed) v = at::randn(v.sizes());
  net->loadStateDict(changed, "transformer.");
  EXPECT_TRUE(net->adapter("transformer_blocks.0.attn.to_q")
                  ->up.equal(changed.at("transformer.transformer_blocks.0.attn.to_q.lora_B.weight")));

  auto missing = changed;
  missing.erase("transformer.transformer_blocks.0.attn.to_q.lora_A.weight");
  missing["transformer.bogus.lora_A.weight"] = at::zeros({1});
  try {
    net->loadStateDict(missing, "transformer.");
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.transformer_blocks.0.attn.to_q.lora_A.weight"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("transformer.bogus.lora_A.weight"), std::string::npos);
  }
  auto misShaped = changed;
  misShaped["transformer.transformer_blocks.0.attn.to_q.lora_A.weight"] = at::zeros({5, 5});
  EXPECT_THROW(net->loadStateDict(misShaped, "transformer."), LoadError);
}

TEST(LoraNetwork, AttachmentsNameTheHostAndHoldTheLiveTensors) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(2, 2), f.rules);
  const auto attachments = net->attachments();
  ASSERT_EQ(attachments.size(), net->adapters().size());
  for (size_t i = 0; i < attachments.size(); ++i) {
    const auto& att = *attachments[i];
    EXPECT_EQ(att.kind().name(), "lora_adapter");
    EXPECT_EQ(att.kind(), loraAdapterKind());
    EXPECT_EQ(att.hostPath(), net->adapters()[i]->hostPath());
    const auto tensors = att.tensors();
    ASSERT_EQ(tensors.size(), 2u);
    EXPECT_EQ(tensors[0].first, "lora_A.weight");
    EXPECT_TRUE(tensors[0].second.is_same(net->adapters()[i]->down));
    EXPECT_TRUE(tensors[1].second.is_same(net->adapters()[i]->up));
    EXPECT_EQ(tensors[0].second.device(), net->adapters()[i]->host()->weight.device());
  }
  // Moving to the device it is on keeps the very same tensors.
  const auto before = net->adapters()[0]->down;
  attachments[0]->moveTo(at::Device(at::kCPU));
  EXPECT_TRUE(net->adapters()[0]->down.is_same(before));
}

TEST(LoraNetwork, FromWeightsRejectsUnknownModulesAndBadShapes) {
  TinyFlux f;
  const int64_t h = f.cfg.hiddenSize();
  std::vector<LoraModuleWeights> w{{"transformer_blocks.0.attn.to_q", at::randn({2, h}), at::randn({h, 2}), 2.0}};
  auto net = LoraNetwork::fromWeights(*f.model, w);
  EXPECT_EQ(net->adapters().size(), 1u);
  EXPECT_TRUE(net->adapters()[0]->up.equal(w[0].up));
  net.reset();
  auto bad = w;
  bad[0].modulePath = "transformer_blocks.0.attn.norm_q";
  try {
    LoraNetwork::fromWeights(*f.model, bad);
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0.attn.norm_q"), std::string::npos) << e.what();
  }
  bad = w;
  bad[0].down = at::randn({2, h + 1});
  EXPECT_THROW(LoraNetwork::fromWeights(*f.model, bad), LoadError);
  bad = w;
  bad.push_back(w[0]);
  EXPECT_THROW(LoraNetwork::fromWeights(*f.model, bad), LoadError);
}

TEST(LoraNetwork, GradientsReachOnlyTheAdapters) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(4, 4), f.rules);
  randomizeUps(*net);
  net->train(true);
  const auto out = f.model->forward(f.inputs);
  out.pow(2).mean().backward();
  for (const auto& a : net->adapters()) {
    ASSERT_TRUE(a->down.grad().defined()) << a->hostPath();
    EXPECT_GT(a->up.grad().abs().sum().item<double>(), 0.0) << a->hostPath();
  }
  for (const auto& p : f.model->parameters()) EXPECT_FALSE(p.grad().defined());
}

// The adapter's own backward (LoraAdd) gives plain autograd's gradients, and
// forwardParts (FLUX single blocks' proj_out over [attn, mlp]) is forward(cat(parts))
// without the concatenated copy: same output and the same gradients for the parts
// and both adapter weights, with a bias, a scale and for uneven part widths.
TEST(LoraAdapter, OwnBackwardAndForwardPartsEqualPlainAutograd) {
  TinyFlux f;
  auto net = LoraNetwork::create(*f.model, config(3, 6, {"proj_out"}), f.rules);
  randomizeUps(*net);
  const auto a = net->adapter("single_transformer_blocks.0.proj_out");
  ASSERT_NE(a, nullptr);
  const int64_t in = a->host()->inFeatures();
  ASSERT_TRUE(a->host()->bias.defined());
  // The plain forward through the same adapter as well.
  {
    const auto x = at::randn({2, 5, in}).requires_grad_(true);
    const auto down = a->down.detach().clone().requires_grad_(true);
    const auto up = a->up.detach().clone().requires_grad_(true);
    const auto g = at::randn({2, 5, a->host()->outFeatures()});
    (a->host()->forward(x) * g).sum().backward();
    const auto xr = x.detach().clone().requires_grad_(true);
    ((a->host()->forwardBase(xr) + at::matmul(at::matmul(xr, down.t()), up.t()) * a->scale()) * g).sum().backward();
    EXPECT_TRUE(strata::test::allClose(x.grad(), xr.grad(), 1e-5, 1e-5));
    EXPECT_TRUE(strata::test::allClose(a->down.grad(), down.grad(), 1e-5, 1e-5));
    EXPECT_TRUE(strata::test::allClose(a->up.grad(), up.grad(), 1e-5, 1e-5));
    a->down.mutable_grad() = at::Tensor();
    a->up.mutable_grad() = at::Tensor();
  }
  for (const int64_t split : {int64_t{1}, in / 3, in - 1}) {
    const auto p0 = at::randn({2, 5, split}).requires_grad_(true);
    const auto p1 = at::randn({2, 5, in - split}).requires_grad_(true);
    const auto q0 = p0.detach().clone().requires_grad_(true);
    const auto q1 = p1.detach().clone().requires_grad_(true);
    const auto g = at::randn({2, 5, a->host()->outFeatures()});

    // The reference through plain autograd ops on copies of the adapter's weights.
    const auto down = a->down.detach().clone().requires_grad_(true);
    const auto up = a->up.detach().clone().requires_grad_(true);
    const auto ref = a->host()->forwardBase(at::cat({p0, p1}, -1)) +
                     at::matmul(at::matmul(at::cat({p0, p1}, -1), down.t()), up.t()) * a->scale();
    (ref * g).sum().backward();
    const auto refDown = down.grad();
    const auto refUp = up.grad();

    const auto out = a->host()->forwardParts({q0, q1});
    (out * g).sum().backward();
    EXPECT_EQ(out.sizes(), ref.sizes());
    EXPECT_TRUE(strata::test::allClose(out, ref, 1e-5, 1e-5)) << "split " << split;
    EXPECT_TRUE(strata::test::allClose(q0.grad(), p0.grad(), 1e-5, 1e-5)) << "split " << split;
    EXPECT_TRUE(strata::test::allClose(q1.grad(), p1.grad(), 1e-5, 1e-5)) << "split " << split;
    EXPECT_TRUE(strata::test::allClose(a->down.grad(), refDown, 1e-5, 1e-5)) << "split " << split;
    EXPECT_TRUE(strata::test::allClose(a->up.grad(), refUp, 1e-5, 1e-5)) << "split " << split;
    a->down.mutable_grad() = at::Tensor();
    a->up.mutable_grad() = at::Tensor();
  }
  EXPECT_THROW(a->host()->forwardParts({at::randn({2, 5, in - 1})}), Error);
}
