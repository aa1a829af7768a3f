// A run whose plan does not fit its devices is refused in preflight, before
// anything is loaded: a split (as before) and now one card too, in the training
// phase (the transformer) or the caching phase (T5, CLIP, VAE), with the same
// words. A run on the cpu alone (no card budget) is not refused. The cards are
// simulated (TrainerOptions::devices), as the planner tests simulate them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "common/Text.h"
#include "config/RunConfig.h"
#include "device/DeviceSelection.h"
#include "events/EventBus.h"
#include "io/Image.h"
#include "train/RunPlanning.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

// FLUX.1-dev's shape with random weights (nothing is read), bf16, on a card.
config::RunConfig devOnCard(const fs::path& folder) {
  config::RunConfig c;
  c.job.name = "refused";
  c.job.trainingFolder = folder.string();
  c.model.preset = "flux-dev";
  c.model.randomWeights = true;
  c.model.device = config::ComputeDevice::Cuda;
  c.train.dtype = config::DType::BF16;
  c.train.steps = 2;
  config::DatasetConfig d;
  d.type = config::DatasetType::Shapes;
  d.resolution = {256};
  d.numItems = 2;
  c.datasets = {d};
  c.sample.sampleEvery = 0;
  c.save.saveEvery = 0;
  return c;
}

struct Preflight {
  RunOutcome outcome = RunOutcome::Finished;
  std::vector<std::string> problems;
  int built = 0;  // placement events: something was built
};

Preflight runOn(const config::RunConfig& cfg, const std::string& spec) {
  events::EventBus bus;
  Preflight out;
  auto sub = bus.subscribe([&](const events::Event& e) {
    if (auto* p = std::get_if<events::PreflightFailedEvent>(&e)) out.problems = p->problems;
    if (std::holds_alternative<events::PlacementEvent>(e)) ++out.built;
  });
  TrainerOptions o;
  o.devices = device::simulatedInventory(spec);
  out.outcome = Trainer(cfg, bus, o).run();
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p + "\n";
  return s;
}

}  // namespace

TEST(PlanRefusal, OneCardTooSmallIsRefusedInPreflightInTheSplitsWords) {
  test::TempDir tmp;
  // 23.8 GB of bf16 weights on one 16 GB card (15 GB budget).
  const config::RunConfig one = devOnCard(tmp.path());
  const Preflight single = runOn(one, "1x16GB");
  EXPECT_EQ(single.outcome, RunOutcome::PreflightFailed);
  EXPECT_EQ(exitCodeOf(single.outcome), kExitBadInput);
  EXPECT_EQ(single.built, 0);
  // The refusal, then the ways out, each planned again on the same card.
  ASSERT_GE(single.problems.size(), 2u) << joined(single.problems);
  for (size_t i = 1; i < single.problems.size(); ++i)
    EXPECT_EQ(single.problems[i].rfind("way out: ", 0), 0u) << single.problems[i];
  EXPECT_NE(joined(single.problems).find("way out: quantize the frozen model: model.quantize: true"), std::string::npos)
      << joined(single.problems);
  EXPECT_NE(joined(single.problems).find("way out: split the model over more GPUs"), std::string::npos)
      << joined(single.problems);
  const PreparedRun planned = prepareRun(one, device::simulatedInventory("1x16GB"));
  ASSERT_TRUE(planned.ok());
  EXPECT_FALSE(planned.plan.fits);
  EXPECT_EQ(single.problems[0], "the model does not fit: " + planned.plan.reason);
  EXPECT_NE(single.problems[0].find("cuda:0 needs"), std::string::npos) << single.problems[0];
  EXPECT_FALSE(fs::exists(tmp / "refused")) << "nothing is written for a refused run";

  // The split's refusal: the same words, its own plan's reason.
  config::RunConfig split = one;
  split.model.splitModelOverGpus = true;
  split.model.placement = config::PlacementMode::Memory;
  const Preflight two = runOn(split, "2x8GB");
  ASSERT_GE(two.problems.size(), 2u) << joined(two.problems);
  EXPECT_EQ(
      planWayOut(split, device::simulatedInventory("2x8GB"), prepareRun(split, device::simulatedInventory("2x8GB")))
          .size(),
      two.problems.size() - 1);
  const PreparedRun splitPlan = prepareRun(split, device::simulatedInventory("2x8GB"));
  ASSERT_TRUE(splitPlan.ok());
  EXPECT_EQ(two.problems[0], "the model does not fit: " + splitPlan.plan.reason);
  EXPECT_EQ(planRefusal(splitPlan), two.problems[0]);
}

TEST(PlanRefusal, ACachingPhaseThatDoesNotFitOneCardIsRefused) {
  test::TempDir tmp;
  fs::create_directories(tmp / "photos");
  io::writePng(tmp / "photos" / "a.png", at::rand({3, 64, 64}));
  // The tiny transformer fits an 8 GB card; T5-XXL (9.5 GB in bf16) does not, while it caches the captions.
  config::RunConfig c = devOnCard(tmp.path());
  c.model.preset = "tiny";
  c.model.tokenizerPath =
      (test::sourceDir() / "tests" / "fixtures" / "reference" / "flux_pipeline_a" / "model").string();
  config::DatasetConfig d;
  d.type = config::DatasetType::Images;
  d.folderPath = (tmp / "photos").string();
  d.resolution = {64};
  c.datasets = {d};
  const PreparedRun planned = prepareRun(c, device::simulatedInventory("1x8GB"));
  ASSERT_TRUE(planned.ok()) << (planned.problems.empty() ? "" : planned.problems.front().format());
  EXPECT_EQ(planned.plan.devices.at(0).missingBytes, 0) << planned.plan.reason;  // training fits
  EXPECT_FALSE(planned.plan.caching.fits) << planned.plan.reason;

  const Preflight r = runOn(c, "1x8GB");
  EXPECT_EQ(r.outcome, RunOutcome::PreflightFailed);
  ASSERT_GE(r.problems.size(), 2u) << joined(r.problems);
  EXPECT_EQ(r.problems[0], "the model does not fit: " + planned.plan.reason);
  // The way out of a caching phase that does not fit: the text encoders in 8 bits, where that fits.
  EXPECT_NE(joined(r.problems).find("way out: quantize the text encoders: model.quantize_te: true"), std::string::npos)
      << joined(r.problems);
  EXPECT_NE(joined(r.problems).find("(this fits)"), std::string::npos) << joined(r.problems);
  EXPECT_NE(r.problems[0].find("Caching, before the transformer is placed, on cuda:0"), std::string::npos)
      << r.problems[0];
  EXPECT_NE(r.problems[0].find("does not fit, " + formatBytes(planned.plan.caching.missingBytes) + " missing."),
            std::string::npos)
      << r.problems[0];
  EXPECT_EQ(r.built, 0);
}

TEST(PlanRefusal, APlanThatFitsSimulatedCardsStopsBeforeAnythingIsLoaded) {
  test::TempDir tmp;
  config::RunConfig c = devOnCard(tmp.path());
  c.model.preset = "tiny";
  const Preflight r = runOn(c, "1x16GB");
  EXPECT_EQ(r.outcome, RunOutcome::PreflightFailed);
  ASSERT_EQ(r.problems.size(), 1u) << joined(r.problems);
  EXPECT_EQ(r.problems[0].rfind("the plan fits the simulated devices (simulated (--devices 1x16GB))", 0), 0u)
      << r.problems[0];
  EXPECT_EQ(r.built, 0);
}

TEST(PlanRefusal, TheCpuAloneIsNotRefused) {
  // FLUX.1-dev on a 4 GB host: the plan does not fit, but a cpu run has no card
  // budget to keep (the system may swap): it is not refused in preflight.
  test::TempDir tmp;
  config::RunConfig c = devOnCard(tmp.path());
  c.model.device = config::ComputeDevice::Cpu;
  c.train.dtype = config::DType::FP32;
  c.model.memoryReserveGb = 0;
  PrepareOptions po;
  po.preview = true;
  const PreparedRun r = prepareRun(c, device::simulatedInventory("cpu:4GB"), po);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.plan.fits) << r.plan.reason;
  EXPECT_EQ(planRefusal(r), "");
}
