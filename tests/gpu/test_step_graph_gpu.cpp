// train.cuda_graph on a card (label gpu; skips without CUDA): the replayed steps train
// as the eager ones do (the same losses and gradient norms, step for step), the first
// two steps run eagerly and every later one replays; a micro-batch of other shapes
// drops the graph with a warning and the run goes on; a Llama run replays too; the
// graph's memory goes back at the end of the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "models/llama/LlamaConfig.h"
#include "train/Trainer.h"
#include "train/TrainerSupport.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::train;

namespace {

config::RunConfig fluxTiny(const fs::path& folder, bool graph) {
  config::RunConfig c;
  c.job.name = graph ? "graph" : "eager";
  c.job.trainingFolder = folder.string();
  c.model.preset = "tiny";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.network.linear = 8;
  c.train.steps = 8;
  c.train.lr = 1e-3;
  c.train.dtype = config::DType::BF16;
  c.train.gradientCheckpointing = false;
  c.train.cudaGraph = graph;
  c.train.ema.useEma = true;  // updated after each replay, outside the graph
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {128};
  d.numItems = 4;
  c.datasets = {d};
  c.sample.sampleEvery = 4;  // a sample between replays: eager work beside the graph's pool
  c.sample.prompts = {"a test"};
  c.sample.width = 128;
  c.sample.height = 128;
  c.sample.sampleSteps = 2;
  c.save.saveEvery = 0;
  return c;
}

struct RunRecord {
  RunOutcome outcome = RunOutcome::Failed;
  std::vector<events::StepEvent> steps;
  std::vector<std::string> warnings;
  std::vector<std::string> failures;
};

RunRecord runOf(const config::RunConfig& c) {
  RunRecord r;
  events::EventBus bus;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) r.steps.push_back(*s);
    if (auto* w = std::get_if<events::WarningEvent>(&e)) r.warnings.push_back(w->message);
    if (auto* f = std::get_if<events::FailedEvent>(&e)) r.failures.push_back(f->message);
    if (auto* p = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& problem : p->problems) r.failures.push_back("preflight: " + problem);
  });
  Trainer t(c, bus);
  r.outcome = t.run();
  return r;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Losses and gradient norms of two runs, step for step: the largest relative difference.
double largestDifference(const RunRecord& a, const RunRecord& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.steps.size() && i < b.steps.size(); ++i) {
    for (auto [x, y] : {std::pair{a.steps[i].loss, b.steps[i].loss}, {a.steps[i].gradNorm, b.steps[i].gradNorm}})
      worst = std::max(worst, std::abs(x - y) / std::max(std::abs(x), 1e-12));
  }
  return worst;
}

}  // namespace

TEST(StepGraphGpu, ReplayedFluxStepsTrainAsTheEagerOnes) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  releaseDeviceCaches();
  const RunRecord eager = runOf(fluxTiny(tmp / "eager", false));
  const RunRecord graph = runOf(fluxTiny(tmp / "graph", true));
  ASSERT_EQ(eager.outcome, RunOutcome::Finished) << joined(eager.failures);
  ASSERT_EQ(graph.outcome, RunOutcome::Finished) << joined(graph.failures) << joined(graph.warnings);
  ASSERT_EQ(graph.steps.size(), 8u);
  for (const auto& s : graph.steps) EXPECT_EQ(s.graphReplayed, s.step >= 3) << "step " << s.step;
  for (const auto& s : eager.steps) EXPECT_FALSE(s.graphReplayed);
  for (const auto& w : graph.warnings) EXPECT_EQ(w.find("cuda_graph"), std::string::npos) << w;
  const double diff = largestDifference(eager, graph);
  std::cout << "[step graph gpu] FLUX tiny, 8 steps: largest relative difference of loss / grad norm " << diff
            << "; losses eager " << eager.steps.back().loss << ", graph " << graph.steps.back().loss << "\n";
  // The same kernels on the same inputs: equal up to the order of a reduction.
  EXPECT_LT(diff, 1e-4);
  // The losses move: the replays train (the optimizer updates the tensors the graph reads).
  EXPECT_NE(graph.steps[2].loss, graph.steps[7].loss);
  // The graph's pool goes with the run.
  EXPECT_EQ(device::memoryFigures(0).allocatedBytes, 0);
  EXPECT_EQ(device::memoryFigures(0).reservedBytes, 0) << "the graph's memory was not returned";
}

TEST(StepGraphGpu, AMicroBatchOfOtherShapesDropsTheGraph) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto c = fluxTiny(tmp / "buckets", true);
  c.sample.sampleEvery = 0;
  c.train.steps = 12;
  // Two datasets of two sizes, drawn in turn: the shapes change between steps.
  c.datasets.front().numItems = 6;
  c.datasets.push_back(c.datasets.front());
  c.datasets.back().resolution = {192};
  const RunRecord r = runOf(c);
  ASSERT_EQ(r.outcome, RunOutcome::Finished) << joined(r.failures);
  const auto dropped = std::find_if(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
    return w.find("train.cuda_graph") != std::string::npos && w.find("the graph is dropped") != std::string::npos;
  });
  ASSERT_NE(dropped, r.warnings.end()) << joined(r.warnings);
  std::cout << "[step graph gpu] " << *dropped << "\n";
  // Replays stop at the drop and do not come back.
  bool seenEagerAfterReplay = false;
  for (const auto& s : r.steps) {
    if (seenEagerAfterReplay) EXPECT_FALSE(s.graphReplayed) << "step " << s.step;
    if (!s.graphReplayed && s.step > 3) seenEagerAfterReplay = true;
  }
  EXPECT_TRUE(seenEagerAfterReplay);
}

TEST(StepGraphGpu, ReplayedLlamaStepsTrainAsTheEagerOnes) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  fs::create_directories(tmp / "model");
  std::ofstream(tmp / "model" / "config.json") << llama::LlamaConfig::tiny().toJson().dump(2);
  auto config = [&](bool graph) {
    config::RunConfig c;
    c.job.name = graph ? "graph" : "eager";
    c.job.trainingFolder = (tmp / c.job.name).string();
    c.model.arch = std::string("llama");
    c.model.nameOrPath = (tmp / "model").string();
    c.model.randomWeights = true;
    c.model.device = config::ComputeDevice::Cuda;
    c.model.gpuIds = {0};
    c.network.linear = 8;
    c.train.steps = 8;
    c.train.batchSize = 2;
    c.train.lr = 1e-3;
    c.train.dtype = config::DType::BF16;
    c.train.gradientCheckpointing = false;
    c.train.cudaGraph = graph;
    config::DatasetConfig d;
    d.type = config::DatasetType::Synthetic;
    d.numItems = 8;
    d.maxSeqLen = 64;
    c.datasets = {d};
    c.sample.sampleEvery = 0;
    c.save.saveEvery = 0;
    c.save.dtype = config::DType::BF16;
    c.save.exportFormats = {config::ExportFormat::Peft};
    return c;
  };
  const RunRecord eager = runOf(config(false));
  const RunRecord graph = runOf(config(true));
  ASSERT_EQ(eager.outcome, RunOutcome::Finished) << joined(eager.failures);
  ASSERT_EQ(graph.outcome, RunOutcome::Finished) << joined(graph.failures) << joined(graph.warnings);
  for (const auto& s : graph.steps) EXPECT_EQ(s.graphReplayed, s.step >= 3) << "step " << s.step;
  const double diff = largestDifference(eager, graph);
  std::cout << "[step graph gpu] Llama tiny, 8 steps: largest relative difference of loss / grad norm " << diff << "\n";
  EXPECT_LT(diff, 1e-4);
}
