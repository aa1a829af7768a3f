// core/dist: torchrun's variables read and checked, and the c10d collective of two
// ranks (two threads of this process on Gloo over loopback): all-reduce,
// broadcast, rank 0's verdicts, the reducer's average, and the clear errors of a
// port in use, an unreachable master and configs that differ.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <map>
#include <string>
#include <thread>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "common/TwoRanks.h"
#include "dist/AveragingReducer.h"
#include "dist/C10dCollective.h"
#include "dist/LaunchEnv.h"
#include "dist/ParallelDims.h"

namespace {

using namespace strata::dist;

std::function<const char*(const char*)> envOf(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    launchEnvFrom(envOf(vars));
  } catch (const strata::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, OneProcessWithoutTheVariablesOrWithWorldSizeOne) {
  EXPECT_FALSE(launchEnvFrom(envOf({})).has_value());
  EXPECT_FALSE(launchEnvFrom(envOf({{"WORLD_SIZE", "1"}, {"RANK", "0"}})).has_value());
}

TEST(LaunchEnv, ReadsTorchrunsVariables) {
  const auto env = launchEnvFrom(envOf({{"RANK", "5"},
                                        {"WORLD_SIZE", "8"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "node0"},
                                        {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->worldSize, 8);
  EXPECT_EQ(env->localRank, 1);
  EXPECT_EQ(env->localWorldSize, 4);
  EXPECT_EQ(env->masterAddr, "node0");
  EXPECT_EQ(env->masterPort, 29500);
  // One node: the local variables default to the global ones.
  const auto one =
      launchEnvFrom(envOf({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->localRank, 1);
  EXPECT_EQ(one->localWorldSize, 2);
}

TEST(LaunchEnv, EachBadVariableIsNamed) {
  const std::map<std::string, std::string> good = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}};
  auto with = [&](const std::string& key, const std::string& value) {
    auto v = good;
    if (value.empty())
      v.erase(key);
    else
      v[key] = value;
    return errorOf(v);
  };
  EXPECT_EQ(errorOf(good), "");
  EXPECT_NE(with("RANK", "").find("RANK is not set"), std::string::npos);
  EXPECT_NE(with("RANK", "2").find("RANK=2 is outside 0..1"), std::string::npos);
  EXPECT_NE(with("RANK", "one").find("RANK='one' is not a whole number"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE=0"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "99999999").find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT=70000 is outside 1..65535"), std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "3").find("LOCAL_RANK=3"), std::string::npos);
}

// The measuring switches (docs/data-parallel.md, "The reduce's cost"): a group of one,
// Gloo on the host, ranks sharing the config's cards; anything else is refused by name.
TEST(LaunchEnv, MeasuringSwitches) {
  const std::map<std::string, std::string> one = {
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}};
  auto with = [&one](std::map<std::string, std::string> extra) {
    auto v = one;
    for (auto& [k, val] : extra) v[k] = val;
    return v;
  };
  EXPECT_FALSE(launchEnvFrom(envOf(with({{"STRATA_DIST_GROUP_OF_ONE", "0"}}))).has_value());
  const auto group = launchEnvFrom(envOf(with({{"STRATA_DIST_GROUP_OF_ONE", "1"}})));
  ASSERT_TRUE(group.has_value());
  EXPECT_EQ(group->worldSize, 1);
  EXPECT_EQ(group->backend, "");
  EXPECT_FALSE(group->shareCards);
  const auto gloo = launchEnvFrom(
      envOf(with({{"WORLD_SIZE", "2"}, {"STRATA_DIST_BACKEND", "gloo"}, {"STRATA_DIST_SHARE_CARDS", "1"}})));
  ASSERT_TRUE(gloo.has_value());
  EXPECT_EQ(gloo->backend, "gloo");
  EXPECT_TRUE(gloo->shareCards);
  EXPECT_TRUE(gloo->overlap) << "the gradients' sums overlap the backward unless told not to";
  const auto after = launchEnvFrom(envOf(with({{"STRATA_DIST_GROUP_OF_ONE", "1"}, {"STRATA_DIST_OVERLAP", "0"}})));
  ASSERT_TRUE(after.has_value());
  EXPECT_FALSE(after->overlap);
  strata::config::RunConfig cfg;  // one card
  for (int r = 0; r < 2; ++r) {
    LaunchEnv e = *gloo;
    e.rank = e.localRank = r;
    EXPECT_EQ(parallelDimsOf(cfg, e, {0}).cards, std::vector<int>{0}) << "rank " << r << " shares card 0";
  }
  EXPECT_NE(errorOf(with({{"STRATA_DIST_GROUP_OF_ONE", "yes"}})).find("STRATA_DIST_GROUP_OF_ONE='yes'"),
            std::string::npos);
  EXPECT_NE(errorOf(with({{"STRATA_DIST_GROUP_OF_ONE", "1"}, {"STRATA_DIST_OVERLAP", "no"}}))
                .find("STRATA_DIST_OVERLAP='no' is not 0 or 1"),
            std::string::npos);
  EXPECT_NE(errorOf(with({{"STRATA_DIST_GROUP_OF_ONE", "1"}, {"STRATA_DIST_BACKEND", "mpi"}}))
                .find("STRATA_DIST_BACKEND='mpi' is not gloo or nccl"),
            std::string::npos);
}

LaunchEnv localRank(int rank, int ranks) {
  LaunchEnv e;
  e.rank = rank;
  e.worldSize = ranks;
  e.localRank = rank;
  e.localWorldSize = ranks;
  return e;
}

std::vector<int> cardsOf(const strata::config::RunConfig& cfg, int rank, int ranks, const std::vector<int>& node) {
  return parallelDimsOf(cfg, localRank(rank, ranks), node).cards;
}

TEST(ParallelDims, EachLocalRankTakesItsGroupOfTheNodesCards) {
  using V = std::vector<int>;
  strata::config::RunConfig one;  // model.device auto, one card
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cardsOf(one, r, 4, {0, 1, 2, 3}), V{r});
  EXPECT_EQ(parallelDimsOf(one, localRank(3, 4), {0, 1, 2, 3}).device(), c10::Device(c10::kCUDA, 3));
  // Without a split a replica is one card, the first the config names.
  one.model.gpuIds = {1, 2};
  EXPECT_EQ(cardsOf(one, 1, 2, {0, 1, 2, 3}), V{2});
  one.model.gpuIds.clear();
  // A 2-card split on [0, 1]: rank 1 on [2, 3].
  strata::config::RunConfig split;
  split.model.splitModelOverGpus = true;
  split.model.gpuIds = {0, 1};
  EXPECT_EQ(cardsOf(split, 0, 2, {0, 1, 2, 3}), (V{0, 1}));
  EXPECT_EQ(cardsOf(split, 1, 2, {0, 1, 2, 3}), (V{2, 3}));
  // Cards the config names are the first group; the next ranks follow them.
  split.model.gpuIds = {2, 3};
  EXPECT_EQ(cardsOf(split, 0, 1, {0, 1, 2, 3}), (V{2, 3}));
  // A split without cards named shares the node's cards out.
  split.model.gpuIds.clear();
  EXPECT_EQ(cardsOf(split, 1, 2, {0, 1, 2, 3}), (V{2, 3}));
  // The CPU, or a node without CUDA: every rank on the CPU.
  strata::config::RunConfig cpu;
  cpu.model.device = strata::config::ComputeDevice::Cpu;
  EXPECT_TRUE(cardsOf(cpu, 1, 2, {0, 1}).empty());
  EXPECT_TRUE(cardsOf(one, 1, 2, {}).empty());
  EXPECT_EQ(parallelDimsOf(cpu, localRank(1, 2), {0, 1}).device(), c10::Device(c10::kCPU));
}

// Named cards with a gap, shifted per local rank, would overlap: refused on both ranks.
TEST(ParallelDims, CardsThatWouldBeSharedAreRefused) {
  strata::config::RunConfig split;
  split.model.splitModelOverGpus = true;
  split.model.gpuIds = {0, 2};
  for (int r = 0; r < 2; ++r) {
    try {
      parallelDimsOf(split, localRank(r, 2), {0, 1, 2, 3, 4});
      ADD_FAILURE() << "rank " << r << " was not refused";
    } catch (const strata::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("local ranks 0 and 1 would share card 2"), std::string::npos) << e.what();
    }
  }
  split.model.gpuIds = {0, 1};  // consecutive: [0, 1] and [2, 3]
  EXPECT_EQ(parallelDimsOf(split, localRank(1, 2), {0, 1, 2, 3, 4}).cards, (std::vector<int>{2, 3}));
}

TEST(ParallelDims, TooFewCardsAreSaidNamingTheLocalRank) {
  strata::config::RunConfig split;
  split.model.splitModelOverGpus = true;
  split.model.gpuIds = {0, 1};
  std::string error;
  try {
    parallelDimsOf(split, localRank(2, 3), {0, 1, 2, 3});
  } catch (const strata::ConfigError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("LOCAL_RANK 2 of 3"), std::string::npos) << error;
  EXPECT_NE(error.find("[0, 1, 2, 3]"), std::string::npos) << error;
}

using strata::test::onTwoRanks;
using strata::test::rankOf;
ConnectOptions quick() { return strata::test::quickOptions(); }

TEST(C10dCollective, AllReduceBroadcastAndShareOnGloo) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  const auto results = onTwoRanks([](C10dCollective& c, const std::shared_ptr<C10dCollective>&) {
    const double r = c.rank();
    // Two dtypes and shapes: packed into one buffer per dtype, unpacked in place.
    std::vector<at::Tensor> t{at::full({2, 3}, r + 1, at::kFloat), at::full({4}, 10 * (r + 1), at::kDouble),
                              at::full({1}, r, at::kFloat)};
    c.allReduceSum(t);
    std::vector<at::Tensor> b{at::full({3}, r + 7, at::kFloat)};
    c.broadcastFromRankZero(b);
    const std::string shared = c.shareFromRankZero("verdict", c.rank() == 0 ? "ok" : "");
    return std::to_string(t[0].sum().item<double>()) + " " + std::to_string(t[1].sum().item<double>()) + " " +
           std::to_string(t[2].item<double>()) + " " + std::to_string(b[0].sum().item<double>()) + " " + shared;
  });
  // 6 x (1 + 2), 4 x (10 + 20), 0 + 1, rank 0's 3 x 7.
  for (const auto& r : results) EXPECT_EQ(r, "18.000000 120.000000 1.000000 21.000000 ok") << r;
}

// network.dtype bf16 on Gloo, which has no bfloat16 (LibTorch 1.13's): packed tensors,
// a broadcast, a started sum of a flat buffer and the reducer's buckets all go as
// float32 and come back in bfloat16, in place.
TEST(C10dCollective, BfloatTensorsAreSummedAndBroadcastOnGloo) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  const auto results = onTwoRanks([](C10dCollective& c, const std::shared_ptr<C10dCollective>& shared) {
    const double r = c.rank();
    std::vector<at::Tensor> t{at::full({2, 3}, r + 1, at::kBFloat16), at::full({4}, 0.5 * (r + 1), at::kBFloat16)};
    c.allReduceSum(t);
    std::vector<at::Tensor> b{at::full({3}, r + 7, at::kBFloat16)};
    c.broadcastFromRankZero(b);
    at::Tensor flat = at::full({5}, 2 * (r + 1), at::kBFloat16);
    c.startAllReduceSum(flat)->wait();
    auto p = at::zeros({2}, at::kBFloat16).requires_grad_(true);
    p.mutable_grad() = at::full({2}, 2 * (r + 1), at::kBFloat16);  // 2 and 4: average 3
    std::vector<at::Tensor> params{p};
    std::vector<at::Tensor> losses{at::full({}, r, at::kFloat)};
    strata::train::StepGradients step{params, losses};
    AveragingReducer(shared).reduce(step);
    std::string out;
    for (const auto& x : {t[0], t[1], b[0], flat, p.grad()})
      out += std::string(c10::toString(x.scalar_type())) + " " + std::to_string(x.to(at::kFloat).sum().item<double>()) +
             " ";
    return out;
  });
  // 6 x (1 + 2), 4 x (0.5 + 1), rank 0's 3 x 7, 5 x (2 + 4), the average 2 x 3.
  for (const auto& r : results)
    EXPECT_EQ(r, "BFloat16 18.000000 BFloat16 6.000000 BFloat16 21.000000 BFloat16 30.000000 BFloat16 6.000000 ") << r;
}

TEST(C10dCollective, TheReducerAveragesGradientsAndLosses) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  const auto results = onTwoRanks([](C10dCollective& c, const std::shared_ptr<C10dCollective>& shared) {
    const double r = c.rank();
    auto p = at::zeros({2}, at::kFloat).requires_grad_(true);
    p.mutable_grad() = at::full({2}, 2 * (r + 1), at::kFloat);  // 2 and 4: average 3
    auto q = at::zeros({1}, at::kFloat).requires_grad_(true);   // no gradient on either rank
    std::vector<at::Tensor> params{p, q};
    std::vector<at::Tensor> losses{at::full({}, r, at::kFloat), at::full({}, 4 * r, at::kFloat)};
    strata::train::StepGradients step{params, losses};
    AveragingReducer(shared).reduce(step);
    return std::to_string(p.grad()[0].item<double>()) + " " + std::to_string(q.grad()[0].item<double>()) + " " +
           std::to_string(losses[0].item<double>()) + " " + std::to_string(losses[1].item<double>());
  });
  for (const auto& r : results) EXPECT_EQ(r, "3.000000 0.000000 0.500000 2.000000") << r;
}

// One optimizer step of a chain of four layers, y = tanh(... tanh(x W0^T) ... W3^T),
// on this rank's inputs: `micro` micro-batches accumulate, the reducer's hook before
// the last backward, then its reduce. params[4] is used by no layer. The averaged
// gradients go to `grads`; returns the losses and "| started of buckets".
std::string chainStep(AveragingReducer& reducer, const std::vector<at::Tensor>& params, int rank, int micro, int step,
                      std::vector<at::Tensor>& grads) {
  for (const auto& p : params) p.mutable_grad().reset();
  std::vector<at::Tensor> losses;
  for (int m = 0; m < micro; ++m) {
    // A generator of its own: both ranks are threads of this process.
    const auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + 10 * rank + m + 1000 * step));
    at::Tensor y = at::randn({8, 64}, gen, at::kFloat);
    for (size_t k = 0; k < 4; ++k) y = at::tanh(at::matmul(y, params[k].t()));
    const at::Tensor loss = y.pow(2).mean();
    if (m == micro - 1) reducer.beforeLastBackward(params);
    (loss / micro).backward();
    losses.push_back(loss.detach());
  }
  strata::train::StepGradients sg{params, losses};
  reducer.reduce(sg);
  std::string out;
  grads.clear();
  for (const auto& p : params) grads.push_back(p.grad().clone());
  for (const auto& l : losses) out += std::to_string(l.item<double>()) + " ";
  return out + "| " + std::to_string(reducer.startedDuringBackward()) + " of " + std::to_string(reducer.buckets());
}

std::vector<at::Tensor> chainParams() {
  const auto gen = at::detail::createCPUGenerator(7);  // the same weights on both ranks
  std::vector<at::Tensor> params;
  for (int k = 0; k < 4; ++k) params.push_back((at::randn({64, 64}, gen, at::kFloat) * 0.2).requires_grad_(true));
  params.push_back(at::zeros({3}, at::kFloat).requires_grad_(true));
  return params;
}

TEST(C10dCollective, TheGradientsSumsStartDuringTheBackwardAndGiveTheSameStep) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  for (const int micro : {1, 3}) {
    const auto results = onTwoRanks([micro](C10dCollective& c, const std::shared_ptr<C10dCollective>& shared) {
      // 64 x 64 floats are 16 KiB: one layer to a bucket of 20 KiB.
      const auto a = chainParams(), b = chainParams();
      AveragingReducer overlapped(shared, true, 20 << 10), after(shared, false, 20 << 10);
      std::string out;
      for (int step = 0; step < 2; ++step) {
        std::vector<at::Tensor> ga, gb;
        const std::string x = chainStep(overlapped, a, c.rank(), micro, step, ga);
        const std::string y = chainStep(after, b, c.rank(), micro, step, gb);
        double diff = 0.0, sum = 0.0;
        for (size_t i = 0; i < ga.size(); ++i) {
          diff = std::max(diff, (ga[i] - gb[i]).abs().max().item<double>());
          sum += ga[i].abs().sum().item<double>();
        }
        out += "step " + std::to_string(step) + ": " + x + " / " + y + " difference " + std::to_string(diff) + " sum " +
               std::to_string(sum) + " unused " + std::to_string(ga[4].abs().sum().item<double>()) + "\n";
      }
      return out;
    });
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0], results[1]) << "both ranks hold the same averaged step";
    const std::string& r = results[0];
    SCOPED_TRACE(r);
    EXPECT_EQ(r.find("difference 0.000000 sum 0.000000"), std::string::npos) << "the gradients are not all zero";
    EXPECT_NE(r.find("step 0: "), std::string::npos);
    for (const char* step : {"step 0: ", "step 1: "}) {
      const std::string line = r.substr(r.find(step), r.find('\n', r.find(step)) - r.find(step));
      EXPECT_NE(line.find("difference 0.000000"), std::string::npos)
          << "overlapped and after-the-backward sums give the same gradients: " << line;
      EXPECT_NE(line.find("unused 0.000000"), std::string::npos) << line;
      EXPECT_NE(line.find("| 0 of 0 difference"), std::string::npos)
          << "the reducer told not to overlap makes no buckets";
    }
    // Step 0: the unused parameter shares the first bucket with the last layer, which
    // never completes, and holds back every sum until reduce(). Step 1: it waits in a
    // bucket of its own at the end, and the four layers' sums start during the backward.
    EXPECT_NE(r.find("| 0 of 4 /"), std::string::npos);
    EXPECT_NE(r.find("| 4 of 5 /"), std::string::npos);
  }
}

TEST(C10dCollective, ConfigsThatDifferAreRefusedByRank) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  const auto results = onTwoRanks([](C10dCollective&, const std::shared_ptr<C10dCollective>&) { return "joined"; },
                                  {"config-a", "config-b"});
  EXPECT_NE(results[0].find("rank(s) 1 differs"), std::string::npos) << results[0];
  EXPECT_NE(results[1].find("rank(s) 0 differs"), std::string::npos) << results[1];
}

TEST(C10dCollective, APortInUseIsSaid) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  // A listener on the port, as another job's store would be.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  std::string error;
  try {
    connect(rankOf(0, 2, port), quick());
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::close(fd);
  EXPECT_NE(error.find("MASTER_PORT " + std::to_string(port) + " is in use"), std::string::npos) << error;
}

TEST(C10dCollective, AnUnreachableMasterIsSaidWithinTheTimeout) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  const int port = strata::test::freeLoopbackPort();  // nobody serves it
  auto o = quick();
  o.connectTimeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    connect(rankOf(1, 2, port), o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(error.find("could not reach rank 0 at MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << error;
}

TEST(C10dCollective, AWrongWorldSizeIsSaidWithinTheTimeout) {
  if (const auto why = backendProblem(c10::Device(c10::kCPU)); !why.empty()) GTEST_SKIP() << why;
  // WORLD_SIZE=2 but rank 1 never starts.
  auto o = quick();
  o.connectTimeout = std::chrono::seconds(2);
  std::string error;
  try {
    connect(rankOf(0, 2, strata::test::freeLoopbackPort()), o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("not all WORLD_SIZE=2 ranks joined"), std::string::npos) << error;
}

}  // namespace
