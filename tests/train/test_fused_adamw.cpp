// FusedAdamW against LibTorch's AdamW: the same update over several steps (the
// foreach path here; the fused kernel on CUDA in tests/gpu), the same state for
// checkpoints, and the placement attachment still sees and moves that state.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <torch/optim/adamw.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "io/Safetensors.h"
#include "placement/OptimizerStateAttachment.h"
#include "train/FusedAdamW.h"
#include "train/OptimizerState.h"

using namespace strata;
using namespace strata::train;

namespace {

// Parameters of LoRA-like shapes and their gradients for `steps` steps, drawn from `seed`.
struct Problem {
  std::vector<at::Tensor> params;
  std::vector<std::vector<at::Tensor>> grads;  // [step][param]
};

Problem makeProblem(uint64_t seed, int steps, const std::vector<std::vector<int64_t>>& shapes) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  Problem p;
  for (const auto& s : shapes) p.params.push_back(at::randn(s, g, at::kFloat));
  for (int i = 0; i < steps; ++i) {
    std::vector<at::Tensor> gs;
    for (const auto& s : shapes) gs.push_back(at::randn(s, g, at::kFloat) * (0.1 * (i + 1)));
    p.grads.push_back(gs);
  }
  return p;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.clone().requires_grad_(true));
  return out;
}

torch::optim::AdamWOptions options() {
  torch::optim::AdamWOptions o(3e-3);
  o.betas(std::make_tuple(0.9, 0.99));
  o.eps(1e-8);
  o.weight_decay(0.05);
  return o;
}

double maxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / (b.abs().max() + 1e-12)).item<double>();
}

}  // namespace

TEST(FusedAdamW, SameUpdateAsLibTorchAdamWOverSteps) {
  const auto prob = makeProblem(7, 6, {{16, 64}, {48, 16}, {16, 3}, {5}});
  auto refParams = clones(prob.params);
  auto newParams = clones(prob.params);
  torch::optim::AdamW ref(refParams, options());
  FusedAdamW fused(newParams, options());
  for (size_t s = 0; s < prob.grads.size(); ++s) {
    for (size_t i = 0; i < refParams.size(); ++i) {
      refParams[i].mutable_grad() = prob.grads[s][i].clone();
      newParams[i].mutable_grad() = prob.grads[s][i].clone();
    }
    if (s == 3) {
      // A parameter without a gradient this step: both skip it (its step count lags).
      refParams[1].mutable_grad() = at::Tensor();
      newParams[1].mutable_grad() = at::Tensor();
    }
    ref.step();
    fused.step();
    for (size_t i = 0; i < refParams.size(); ++i)
      EXPECT_LT(maxRelDiff(newParams[i], refParams[i]), 1e-6) << "step " << s + 1 << " param " << i;
  }
  EXPECT_EQ(fused.lastPath(), fusedAdamWAvailable(c10::Device(c10::kCPU)) ? "fused" : "foreach");
  // The updates really moved the parameters (a test that cannot fail proves nothing).
  EXPECT_GT(maxRelDiff(newParams[0], prob.params[0]), 1e-4);
  // Same state, read through the checkpoint code: moments and step counts.
  NamedParams refNamed, newNamed;
  for (size_t i = 0; i < refParams.size(); ++i) {
    refNamed.emplace_back("p" + std::to_string(i), refParams[i]);
    newNamed.emplace_back("p" + std::to_string(i), newParams[i]);
  }
  const auto a = saveAdamWState(ref, refNamed);
  const auto b = saveAdamWState(fused, newNamed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    if (a[i].first.size() > 5 && a[i].first.substr(a[i].first.size() - 5) == ".step")
      EXPECT_EQ(a[i].second.item<int64_t>(), b[i].second.item<int64_t>()) << a[i].first;
    else
      EXPECT_LT(maxRelDiff(b[i].second, a[i].second), 1e-6) << a[i].first;
  }
  const auto stepOf = [&](const std::string& key) {
    for (const auto& [k, t] : b)
      if (k == key) return t.item<int64_t>();
    return int64_t{-1};
  };
  EXPECT_EQ(stepOf("p0.step"), 6);
  EXPECT_EQ(stepOf("p1.step"), 5);
}

TEST(FusedAdamW, ResumedStateContinuesAsAnUnbrokenRun) {
  const auto prob = makeProblem(11, 5, {{8, 32}, {32, 8}});
  // Unbroken: 5 steps.
  auto whole = clones(prob.params);
  FusedAdamW a(whole, options());
  for (int s = 0; s < 5; ++s) {
    for (size_t i = 0; i < whole.size(); ++i) whole[i].mutable_grad() = prob.grads[s][i].clone();
    a.step();
  }
  // Broken after 3: state saved, a new optimizer loads it and does the last 2.
  auto first = clones(prob.params);
  NamedParams named;
  for (size_t i = 0; i < first.size(); ++i) named.emplace_back("p" + std::to_string(i), first[i]);
  std::map<std::string, at::Tensor> saved;
  {
    FusedAdamW b(first, options());
    for (int s = 0; s < 3; ++s) {
      for (size_t i = 0; i < first.size(); ++i) first[i].mutable_grad() = prob.grads[s][i].clone();
      b.step();
    }
    for (const auto& [k, t] : saveAdamWState(b, named)) saved[k] = t.clone();
  }
  FusedAdamW c(first, options());
  loadAdamWState(c, named, saved);
  for (int s = 3; s < 5; ++s) {
    for (size_t i = 0; i < first.size(); ++i) first[i].mutable_grad() = prob.grads[s][i].clone();
    c.step();
  }
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_TRUE(at::equal(first[i], whole[i])) << "param " << i;
}

TEST(FusedAdamW, StateIsAnAttachmentThatSeesAndMovesIt) {
  auto p = at::randn({4, 6}).requires_grad_(true);
  auto opt = std::make_shared<FusedAdamW>(std::vector<at::Tensor>{p}, options());
  auto att = placement::OptimizerStateAttachment::forParameters(opt, {{"blocks.0.lora_A.weight", p}});
  ASSERT_EQ(att.size(), 1u);
  EXPECT_TRUE(att[0]->tensors().empty());  // no state before the first step
  p.mutable_grad() = at::ones_like(p);
  opt->step();
  const auto t = att[0]->tensors();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].first, "exp_avg");
  EXPECT_GT(t[0].second.abs().sum().item<double>(), 0.0);
  att[0]->moveTo(c10::Device(c10::kCPU));  // a move to where it is keeps the same tensors
  EXPECT_TRUE(att[0]->tensors()[0].second.is_same(t[0].second));
}

TEST(FusedAdamW, AmsgradTakesAdamWsOwnStep) {
  auto p = at::randn({3, 3}).requires_grad_(true);
  auto q = p.detach().clone().requires_grad_(true);
  auto o = options();
  o.amsgrad(true);
  torch::optim::AdamW ref(std::vector<at::Tensor>{q}, o);
  FusedAdamW fused(std::vector<at::Tensor>{p}, o);
  for (int s = 0; s < 3; ++s) {
    p.mutable_grad() = at::full_like(p, 0.5 * (s + 1));
    q.mutable_grad() = at::full_like(q, 0.5 * (s + 1));
    ref.step();
    fused.step();
  }
  EXPECT_EQ(fused.lastPath(), "per-tensor");
  EXPECT_TRUE(at::equal(p, q));
}

TEST(FusedAdamW, OnlyTheFusedPathCanSkipOnTheDevice) {
  auto p = at::randn({3, 3}).requires_grad_(true);
  FusedAdamW fused(std::vector<at::Tensor>{p}, options());
  // No fused kernel for the CPU: the trainer then reads the norm before stepping.
  EXPECT_FALSE(fused.canSkipOnDevice());
  EXPECT_THROW(fused.skipNextStepIfNotFinite(at::full({}, NAN)), std::exception);
}

TEST(FusedAdamW, StagingChunksStayWithinTheLimit) {
  using Chunks = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(stagingChunks({10, 20, 30, 5}, 30), (Chunks{{0, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(stagingChunks({10, 20, 30, 5}, 1000), (Chunks{{0, 4}}));
  EXPECT_EQ(stagingChunks({100, 5, 5}, 30), (Chunks{{0, 1}, {1, 3}}));  // larger than the limit: alone
  EXPECT_EQ(stagingChunks({}, 30), Chunks{});
  EXPECT_THROW(stagingChunks({1}, 0), Error);
  FusedAdamW opt(std::vector<at::Tensor>{at::zeros({1}).requires_grad_(true)}, options());
  EXPECT_EQ(opt.stagingChunkBytes(), FusedAdamW::kDefaultStagingChunkBytes);
  EXPECT_THROW(opt.setStagingChunkBytes(0), Error);
}

// train.offload_optimizer_state's step, on the CPU: the moments staged in chunks
// (copied out, updated, copied back) give the same bits as updating them in place.
// On CUDA the copies go between pinned host memory and the card (tests/gpu).
TEST(FusedAdamW, StagedMomentsGiveTheSameBitsAsTheDirectStep) {
  const std::vector<std::vector<int64_t>> shapes{{16, 64}, {48, 16}, {16, 3}, {5}, {64, 16}, {7, 7}};
  const auto prob = makeProblem(23, 5, shapes);
  auto directParams = clones(prob.params);
  auto stagedParams = clones(prob.params);
  FusedAdamW direct(directParams, options());
  FusedAdamW staged(stagedParams, options());
  staged.setStateInHostMemory(true);
  staged.setStageOnSameDevice(true);
  staged.setStagingChunkBytes(2 * 16 * 64 * 4);  // one of the largest tensors' two moments: several chunks
  std::vector<at::Tensor> firstAvgs;
  for (size_t s = 0; s < prob.grads.size(); ++s) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      directParams[i].mutable_grad() = prob.grads[s][i].clone();
      stagedParams[i].mutable_grad() = prob.grads[s][i].clone();
    }
    if (s == 2) {  // a parameter without a gradient: its step count lags, a bucket of its own later
      directParams[2].mutable_grad() = at::Tensor();
      stagedParams[2].mutable_grad() = at::Tensor();
    }
    direct.step();
    staged.step();
    EXPECT_EQ(direct.lastStagedChunks(), 0);
    EXPECT_GT(staged.lastStagedChunks(), 2) << "step " << s + 1;
    EXPECT_EQ(staged.lastPath(), direct.lastPath());
    for (size_t i = 0; i < shapes.size(); ++i)
      ASSERT_TRUE(at::equal(stagedParams[i], directParams[i])) << "step " << s + 1 << " param " << i;
    if (s == 0) {
      for (const auto& p : stagedParams)
        firstAvgs.push_back(
            static_cast<torch::optim::AdamWParamState&>(*staged.state().at(compat::optimizerStateKey(p))).exp_avg());
    }
  }
  EXPECT_GT(maxRelDiff(stagedParams[0], prob.params[0]), 1e-4);  // the steps did move them
  NamedParams directNamed, stagedNamed;
  for (size_t i = 0; i < shapes.size(); ++i) {
    directNamed.emplace_back("p" + std::to_string(i), directParams[i]);
    stagedNamed.emplace_back("p" + std::to_string(i), stagedParams[i]);
  }
  const auto a = saveAdamWState(direct, directNamed), b = saveAdamWState(staged, stagedNamed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
  }
  // The copies went back into the state's own tensors (a checkpoint reads those): the
  // chunks are [0], [1, 2, 3], [4], [5]; at step 3 param 2 has no gradient, so 1 and 3
  // make a chunk of their own and are packed again, next to each other, and stay so
  // (param 2 steps alone from then on, in its old place).
  auto avgOf = [&](size_t i) {
    return static_cast<torch::optim::AdamWParamState&>(*staged.state().at(compat::optimizerStateKey(stagedParams[i])))
        .exp_avg();
  };
  for (size_t i : {0, 2, 4, 5}) EXPECT_TRUE(avgOf(i).is_same(firstAvgs[i])) << "param " << i << " was re-packed";
  for (size_t i : {1, 3}) EXPECT_FALSE(avgOf(i).is_same(firstAvgs[i])) << "param " << i << " was not re-packed";
  EXPECT_TRUE(avgOf(3).is_alias_of(avgOf(1)));
  EXPECT_EQ(avgOf(3).storage_offset(), avgOf(1).storage_offset() + avgOf(1).numel());
}

// A staged chunk crosses in one copy each way: its moments are views back to back in
// one host buffer after a step, and a state replaced by separate tensors (as a resume
// loads it) is packed again and steps on to the same bits.
TEST(FusedAdamW, StagedMomentsArePackedPerChunkAndRepackedAfterAResume) {
  const std::vector<std::vector<int64_t>> shapes{{16, 64}, {48, 16}, {16, 3}, {5}, {64, 16}};
  const auto prob = makeProblem(41, 3, shapes);
  auto directParams = clones(prob.params), stagedParams = clones(prob.params);
  FusedAdamW direct(directParams, options()), staged(stagedParams, options());
  staged.setStateInHostMemory(true);
  staged.setStageOnSameDevice(true);
  staged.setStagingChunkBytes(2 * (16 * 64 + 48 * 16) * 4);  // chunks [0, 1] and [2, 3, 4]
  auto stateOf = [&](size_t i) -> torch::optim::AdamWParamState& {
    return static_cast<torch::optim::AdamWParamState&>(*staged.state().at(compat::optimizerStateKey(stagedParams[i])));
  };
  for (size_t s = 0; s < prob.grads.size(); ++s) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      directParams[i].mutable_grad() = prob.grads[s][i].clone();
      stagedParams[i].mutable_grad() = prob.grads[s][i].clone();
    }
    direct.step();
    staged.step();
    for (size_t i = 0; i < shapes.size(); ++i)
      ASSERT_TRUE(at::equal(stagedParams[i], directParams[i])) << "step " << s + 1 << " param " << i;
    // Each chunk's moments are one buffer, back to back in order; the two chunks' are two.
    for (const auto& chunk : std::vector<std::vector<size_t>>{{0, 1}, {2, 3, 4}})
      for (size_t k = 1; k < chunk.size(); ++k) {
        const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
            {stateOf(chunk[k - 1]).exp_avg(), stateOf(chunk[k]).exp_avg()},
            {stateOf(chunk[k - 1]).exp_avg_sq(), stateOf(chunk[k]).exp_avg_sq()}};
        for (const auto& [before, after] : pairs) {
          EXPECT_TRUE(after.is_alias_of(before)) << "step " << s + 1 << " param " << chunk[k];
          EXPECT_EQ(after.storage_offset(), before.storage_offset() + before.numel()) << "step " << s + 1;
        }
      }
    EXPECT_FALSE(stateOf(2).exp_avg().is_alias_of(stateOf(1).exp_avg())) << "step " << s + 1;
    if (s == 0) {
      // A resume: every moment a tensor of its own again, same values.
      for (size_t i = 0; i < shapes.size(); ++i) {
        stateOf(i).exp_avg(stateOf(i).exp_avg().clone());
        stateOf(i).exp_avg_sq(stateOf(i).exp_avg_sq().clone());
      }
      EXPECT_FALSE(stateOf(1).exp_avg().is_alias_of(stateOf(0).exp_avg()));
    }
  }
  // The packed views (offsets into a shared buffer) write to a checkpoint file and read
  // back as the direct optimizer's state.
  NamedParams directNamed, stagedNamed;
  for (size_t i = 0; i < shapes.size(); ++i) {
    directNamed.emplace_back("p" + std::to_string(i), directParams[i]);
    stagedNamed.emplace_back("p" + std::to_string(i), stagedParams[i]);
  }
  test::TempDir dir;
  io::writeSafetensors(dir / "optimizer.safetensors", saveAdamWState(staged, stagedNamed));
  const auto back = io::loadSafetensors(dir / "optimizer.safetensors");
  const auto want = saveAdamWState(direct, directNamed);
  ASSERT_EQ(back.size(), want.size());
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(back.count(key)) << key;
    EXPECT_TRUE(at::equal(back.at(key), t)) << key;
  }
}

// A CPU parameter's state is in host memory already: the option changes nothing there.
TEST(FusedAdamW, StateInHostMemoryLeavesCpuParametersAlone) {
  const auto prob = makeProblem(29, 3, {{8, 32}, {32, 8}});
  auto plainParams = clones(prob.params), hostParams = clones(prob.params);
  FusedAdamW plain(plainParams, options()), host(hostParams, options());
  host.setStateInHostMemory(true);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < plainParams.size(); ++i) {
      plainParams[i].mutable_grad() = prob.grads[s][i].clone();
      hostParams[i].mutable_grad() = prob.grads[s][i].clone();
    }
    plain.step();
    host.step();
    EXPECT_EQ(host.lastStagedChunks(), 0);
  }
  for (size_t i = 0; i < plainParams.size(); ++i) EXPECT_TRUE(at::equal(hostParams[i], plainParams[i])) << i;
  for (const auto& p : hostParams) {
    const auto& s = static_cast<torch::optim::AdamWParamState&>(*host.state().at(compat::optimizerStateKey(p)));
    EXPECT_TRUE(s.exp_avg().is_cpu());
  }
}

// A step that fails part way (here a gradient of the wrong shape in the second
// group; on a card, a staging allocation can fail the same way) still lands every
// moment it updated in the state: no copy back is left in flight or dropped.
TEST(FusedAdamW, AStepThatFailsPartWayLandsTheMomentsItUpdated) {
  const std::vector<std::vector<int64_t>> shapes{{16, 64}, {48, 16}, {5}};
  const auto prob = makeProblem(31, 1, shapes);
  auto referenceParams = clones(prob.params), params = clones(prob.params);
  FusedAdamW reference(referenceParams, options());
  FusedAdamW staged(params, options());
  staged.setStateInHostMemory(true);
  staged.setStageOnSameDevice(true);
  staged.setStagingChunkBytes(2 * 16 * 64 * 4);  // several chunks, so copies back are pending between them
  auto misfit = at::zeros({4, 4}).requires_grad_(true);
  staged.add_param_group(torch::optim::OptimizerParamGroup({misfit}));
  for (size_t i = 0; i < shapes.size(); ++i) {
    referenceParams[i].mutable_grad() = prob.grads[0][i].clone();
    params[i].mutable_grad() = prob.grads[0][i].clone();
  }
  misfit.mutable_grad() = at::ones({5});
  EXPECT_ANY_THROW(staged.step());
  reference.step();
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(at::equal(params[i], referenceParams[i])) << "param " << i;
    const auto& s =
        static_cast<torch::optim::AdamWParamState&>(*staged.state().at(compat::optimizerStateKey(params[i])));
    const auto& r = static_cast<torch::optim::AdamWParamState&>(
        *reference.state().at(compat::optimizerStateKey(referenceParams[i])));
    EXPECT_EQ(s.step(), 1);
    EXPECT_TRUE(at::equal(s.exp_avg(), r.exp_avg())) << "exp_avg of param " << i;
    EXPECT_TRUE(at::equal(s.exp_avg_sq(), r.exp_avg_sq())) << "exp_avg_sq of param " << i;
  }
}

// A gradient the step refuses leaves every parameter, moment and step count as it was.
TEST(FusedAdamW, ARefusedGradientChangesNothing) {
  const auto prob = makeProblem(37, 2, {{8, 32}, {32, 8}});
  auto params = clones(prob.params);
  FusedAdamW opt(params, options());
  params[0].mutable_grad() = prob.grads[0][0].clone();
  params[1].mutable_grad() = prob.grads[0][1].to_sparse();
  try {
    opt.step();
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sparse gradients are not supported"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(opt.state().empty()) << "no parameter started its state";
  EXPECT_TRUE(at::equal(params[0], prob.params[0]));
  // The same step with a dense gradient then goes through as the first one.
  params[1].mutable_grad() = prob.grads[0][1].clone();
  opt.step();
  EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*opt.state().at(compat::optimizerStateKey(params[0]))).step(),
            1);
}
