// train.cuda_graph on a card (label gpu; skips without CUDA): the replayed steps train
// as the eager ones do (the same losses and gradient norms, step for step, and the same
// LoRA weights at the end), the first two steps run eagerly and every later one
// replays; with gradient checkpointing (no dropout) and with accumulation too, for FLUX
// and Llama; auto (the default) graphs a shipped config's step and leaves a run of two
// sizes eager with the reason said once; a micro-batch of other shapes drops the graph
// with a warning and the run goes on; the graph's memory goes back at the end of the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "models/llama/LlamaConfig.h"
#include "train/RunFolder.h"
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
  c.train.cudaGraph = graph ? config::CudaGraphMode::On : config::CudaGraphMode::Off;
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
  std::vector<events::StartedEvent> started;
  std::map<std::string, at::Tensor> lora;  // the last checkpoint's LoRA (save.save_every > 0)
};

RunRecord runOf(const config::RunConfig& c) {
  RunRecord r;
  events::EventBus bus;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* s = std::get_if<events::StepEvent>(&e)) r.steps.push_back(*s);
    if (auto* w = std::get_if<events::WarningEvent>(&e)) r.warnings.push_back(w->message);
    if (auto* f = std::get_if<events::FailedEvent>(&e)) r.failures.push_back(f->message);
    if (auto* st = std::get_if<events::StartedEvent>(&e)) r.started.push_back(*st);
    if (auto* p = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& problem : p->problems) r.failures.push_back("preflight: " + problem);
  });
  TrainerOptions o;
  o.runDir = fs::path(c.job.trainingFolder) / c.job.name;
  Trainer t(c, bus, o);
  r.outcome = t.run();
  if (c.save.saveEvery > 0) {
    const RunFolder folder(o.runDir);
    if (const auto last = folder.latestCheckpoint()) r.lora = io::loadSafetensors(last->path / "lora.safetensors");
  }
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

// The largest difference between two runs' final LoRA tensors, relative to the
// tensor's largest value; 1 where a tensor is missing.
double largestWeightDifference(const RunRecord& a, const RunRecord& b) {
  if (a.lora.empty() || a.lora.size() != b.lora.size()) return 1.0;
  double worst = 0.0;
  for (const auto& [name, t] : a.lora) {
    const auto other = b.lora.find(name);
    if (other == b.lora.end()) return 1.0;
    const auto x = t.to(at::kDouble), y = other->second.to(at::kDouble);
    const double scale = std::max(x.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (x - y).abs().max().item<double>() / scale);
  }
  return worst;
}

// An eager run and a graphed one of `c` (cuda_graph false and true): the same numbers
// step for step and the same LoRA at the end, every step from the third replayed.
// `graphed`, where given, gets the graphed run.
void expectGraphedRunTrainsAsEager(config::RunConfig c, const fs::path& folder, const std::string& what,
                                   RunRecord* graphed = nullptr) {
  c.save.saveEvery = c.train.steps;  // a checkpoint at the end: the LoRA weights compared
  c.train.cudaGraph = config::CudaGraphMode::Off;
  c.job.trainingFolder = (folder / "eager").string();
  const RunRecord eager = runOf(c);
  c.train.cudaGraph = config::CudaGraphMode::On;
  c.job.trainingFolder = (folder / "graph").string();
  const RunRecord graph = runOf(c);
  if (graphed) *graphed = graph;
  ASSERT_EQ(eager.outcome, RunOutcome::Finished) << what << joined(eager.failures);
  ASSERT_EQ(graph.outcome, RunOutcome::Finished) << what << joined(graph.failures) << joined(graph.warnings);
  ASSERT_EQ(graph.steps.size(), static_cast<size_t>(c.train.steps)) << what;
  for (const auto& s : graph.steps) EXPECT_EQ(s.graphReplayed, s.step >= 3) << what << ", step " << s.step;
  for (const auto& w : graph.warnings) EXPECT_EQ(w.find("cuda_graph"), std::string::npos) << what << ": " << w;
  const double diff = largestDifference(eager, graph);
  const double weights = largestWeightDifference(eager, graph);
  std::cout << "[step graph gpu] " << what << ", " << c.train.steps
            << " steps: largest relative difference of loss / grad norm " << diff << ", of the final LoRA " << weights
            << "; last loss eager " << eager.steps.back().loss << ", graph " << graph.steps.back().loss << "\n";
  EXPECT_LT(diff, 1e-4) << what;
  EXPECT_LT(weights, 1e-4) << what;
  // The losses move: the replays train (the optimizer updates the tensors the graph reads).
  EXPECT_NE(graph.steps[2].loss, graph.steps.back().loss) << what;
}

config::RunConfig llamaTiny(const fs::path& folder) {
  fs::create_directories(folder / "model");
  std::ofstream(folder / "model" / "config.json") << llama::LlamaConfig::tiny().toJson().dump(2);
  config::RunConfig c;
  c.job.name = "llama";
  c.job.trainingFolder = folder.string();
  c.model.arch = std::string("llama");
  c.model.nameOrPath = (folder / "model").string();
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.model.gpuIds = {0};
  c.network.linear = 8;
  c.train.steps = 8;
  c.train.batchSize = 2;
  c.train.lr = 1e-3;
  c.train.dtype = config::DType::BF16;
  c.train.gradientCheckpointing = false;
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
  // Steps 1-2 eager, 3 recorded, 4 replayed; the samples after step 4 take the graph's memory
  // back (Trainer::samples), so 5-6 are eager again, 7 is recorded anew and 8 replayed.
  for (const auto& s : graph.steps)
    EXPECT_EQ(s.graphReplayed, s.step >= 3 && s.step != 5 && s.step != 6) << "step " << s.step;
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
  expectGraphedRunTrainsAsEager(llamaTiny(tmp.path()), tmp.path(), "Llama tiny");
}

// Gradient checkpointing without dropout leaves the random state alone, so the
// checkpointed step records: its replays train as its eager steps (FLUX and Llama).
TEST(StepGraphGpu, CheckpointedStepsReplayAsTheEagerOnes) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto flux = fluxTiny(tmp / "flux", false);
  flux.sample.sampleEvery = 0;
  flux.train.gradientCheckpointing = true;
  expectGraphedRunTrainsAsEager(flux, tmp / "flux", "FLUX tiny, checkpointed");
  auto llama = llamaTiny(tmp / "llama");
  llama.train.gradientCheckpointing = true;
  expectGraphedRunTrainsAsEager(llama, tmp / "llama", "Llama tiny, checkpointed");
}

// Accumulation: the graph adds each micro-batch's gradients into the ones it recorded
// with, zeroed once a step, so 2 micro-batches sum as the eager step's do (FLUX with and
// without checkpointing, Llama).
TEST(StepGraphGpu, AccumulatedStepsReplayAsTheEagerOnes) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto flux = fluxTiny(tmp / "flux", false);
  flux.sample.sampleEvery = 0;
  flux.train.gradientAccumulationSteps = 2;
  expectGraphedRunTrainsAsEager(flux, tmp / "flux", "FLUX tiny, 2 micro-batches");
  flux.train.gradientCheckpointing = true;
  expectGraphedRunTrainsAsEager(flux, tmp / "flux-ckpt", "FLUX tiny, 2 micro-batches, checkpointed");
  auto llama = llamaTiny(tmp / "llama");
  llama.train.gradientAccumulationSteps = 2;
  expectGraphedRunTrainsAsEager(llama, tmp / "llama", "Llama tiny, 2 micro-batches");
}

// train.offload_checkpoints: each block's input goes to a host slot the checkpointing
// keeps, the same on every replay, and comes back for the recompute. Replayed steps
// train as the eager ones, with and without accumulation (FLUX and Llama).
TEST(StepGraphGpu, OffloadedCheckpointsReplayAsTheEagerOnes) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  auto flux = fluxTiny(tmp / "flux", false);
  flux.sample.sampleEvery = 0;
  flux.train.gradientCheckpointing = true;
  flux.train.offloadCheckpoints = true;
  RunRecord graph;
  expectGraphedRunTrainsAsEager(flux, tmp / "flux", "FLUX tiny, checkpoints in host memory", &graph);
  ASSERT_FALSE(graph.started.empty());
  EXPECT_NE(graph.started.front().setup.find("block inputs in host memory"), std::string::npos)
      << graph.started.front().setup;
  flux.train.gradientAccumulationSteps = 2;
  expectGraphedRunTrainsAsEager(flux, tmp / "flux-acc", "FLUX tiny, 2 micro-batches, checkpoints in host memory");
  auto llama = llamaTiny(tmp / "llama");
  llama.train.gradientCheckpointing = true;
  llama.train.offloadCheckpoints = true;
  expectGraphedRunTrainsAsEager(llama, tmp / "llama", "Llama tiny, checkpoints in host memory");
}

// auto, the default: configs/flux-dev-1gpu.yaml's training settings (checkpointing, the
// moments in host memory) on the tiny model graph the step from step 3 and say so in
// the run's header; two resolutions leave it eager, with the reason said once and no
// graph recorded and dropped.
TEST(StepGraphGpu, AutoGraphsAShippedConfigsStep) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  test::TempDir tmp;
  const auto shipped = config::loadRunConfig(test::sourceDir() / "configs" / "flux-dev-1gpu.yaml");
  ASSERT_TRUE(shipped.problems.empty());
  ASSERT_EQ(shipped.config.train.cudaGraph, config::CudaGraphMode::Auto) << "the shipped config leaves it to auto";
  auto c = fluxTiny(tmp.path(), false);
  c.train = shipped.config.train;
  c.train.steps = 6;
  c.sample.sampleEvery = 0;
  c.job.name = "auto";
  const RunRecord r = runOf(c);
  ASSERT_EQ(r.outcome, RunOutcome::Finished) << joined(r.failures);
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_NE(r.started.front().setup.find("the step as a CUDA graph"), std::string::npos) << r.started.front().setup;
  EXPECT_EQ(r.started.front().graphOff, "");
  for (const auto& s : r.steps) EXPECT_EQ(s.graphReplayed, s.step >= 3) << "step " << s.step;
  for (const auto& w : r.warnings) EXPECT_EQ(w.find("cuda_graph"), std::string::npos) << w;

  auto two = c;
  two.job.name = "two-sizes";
  two.datasets.push_back(two.datasets.front());
  two.datasets.back().resolution = {192};
  const RunRecord eager = runOf(two);
  ASSERT_EQ(eager.outcome, RunOutcome::Finished) << joined(eager.failures);
  ASSERT_EQ(eager.started.size(), 1u);
  EXPECT_NE(eager.started.front().graphOff, "");
  EXPECT_NE(eager.started.front().setup.find("no CUDA graph: " + eager.started.front().graphOff), std::string::npos)
      << eager.started.front().setup;
  std::cout << "[step graph gpu] auto, two sizes: " << eager.started.front().setup << "\n";
  for (const auto& s : eager.steps) EXPECT_FALSE(s.graphReplayed) << "step " << s.step;
  for (const auto& w : eager.warnings) EXPECT_EQ(w.find("cuda_graph"), std::string::npos) << w;
}
