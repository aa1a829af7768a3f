// The family conformance suite: every registered model family, at its tiny run
// (ModelFamily::tinyRun), on the CPU. The plan counts what the built model holds,
// unit by unit; the block list holds every parameter and buffer exactly once; the
// LoRA names go model path -> file key -> model path in every file form of the
// family; stop + resume ends where a straight run ends; every export loads back
// equal to the live weights. A new family gets all of this by registering.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "device/DeviceSelection.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "lora/LoraFormats.h"
#include "lora/LoraNetwork.h"
#include "placement/Placement.h"
#include "train/ModelFamily.h"
#include "train/RunFolder.h"
#include "train/RunPlanning.h"
#include "train/Trainer.h"
#include "train/RunContext.h"
#include "train/TrainerSupport.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> registeredArchs() {
  std::vector<std::string> out;
  for (const auto* f : train::registeredModelFamilies()) out.push_back(f->arch());
  return out;
}

// A family's run with its model built and placed as the trainer does it (preflight's
// plan, then prepareData and buildAndPlace), with nothing trained.
struct BuiltRun {
  events::EventBus bus;  // outlives the run, which may hold it
  std::unique_ptr<train::Trainer::State> st = std::make_unique<train::Trainer::State>();
  std::unique_ptr<train::RunContext> context;  // what the family sees of st
  train::FamilyRun& run() { return *st->family; }
};

std::unique_ptr<BuiltRun> buildRun(const train::ModelFamily& family, const config::RunConfig& cfg) {
  auto b = std::make_unique<BuiltRun>();
  b->st->prepared = train::prepareRun(cfg, device::thisMachine());
  std::string problems;
  for (const auto& p : b->st->prepared.problems)
    if (p.isError()) problems += p.format() + "\n";
  if (!problems.empty()) throw Error("the tiny run does not pass preflight:\n" + problems);
  b->st->familyDef = &family;
  b->st->family = family.newRun();
  b->context = std::make_unique<train::RunContext>(*b->st, cfg, b->bus);
  b->run().prepareData(*b->context);
  train::PlacedModel placed = b->run().buildAndPlace(*b->context);
  b->st->placement = std::move(placed.placement);
  return b;
}

// Module path -> up @ down * alpha / rank: what an adapter adds, whatever the file form's rank split.
std::map<std::string, at::Tensor> deltasOf(const std::vector<lora::LoraModuleWeights>& modules) {
  std::map<std::string, at::Tensor> out;
  for (const auto& m : modules) {
    const auto d =
        at::matmul(m.up.to(at::kDouble), m.down.to(at::kDouble)) * (m.alpha / static_cast<double>(m.down.size(0)));
    auto it = out.find(m.modulePath);
    if (it == out.end())
      out.emplace(m.modulePath, d);
    else
      it->second = it->second + d;
  }
  return out;
}

void expectSameDeltas(const std::map<std::string, at::Tensor>& actual,
                      const std::map<std::string, at::Tensor>& expected, const std::string& what) {
  std::set<std::string> a, e;
  for (const auto& [k, v] : actual) a.insert(k);
  for (const auto& [k, v] : expected) e.insert(k);
  ASSERT_EQ(a, e) << what << ": the same modules";
  for (const auto& [k, v] : expected) EXPECT_TRUE(test::allClose(actual.at(k), v, 1e-6, 1e-5)) << what << " " << k;
}

class FamilyConformance : public ::testing::TestWithParam<std::string> {
 protected:
  const train::ModelFamily& family() const { return train::modelFamily(GetParam()); }
  config::RunConfig tinyRun() const { return family().tinyRun(tmp_.path()); }
  test::TempDir tmp_;
};

}  // namespace

TEST(FamilyRegistry, TheKnownFamiliesAreRegistered) {
  const auto archs = registeredArchs();
  for (const std::string arch : {"flux", "flux2", "llama"})
    EXPECT_NE(std::find(archs.begin(), archs.end(), arch), archs.end()) << arch;
}

// The planner's units (ids, parameter counts, LoRA adapters) are the built model's,
// and the built model's block list holds each parameter and buffer exactly once.
TEST_P(FamilyConformance, ThePlanIsTheBuiltModelUnitByUnit) {
  const auto cfg = tinyRun();
  const auto plan = family().plan(cfg);
  auto built = buildRun(family(), cfg);
  torch::nn::Module& model = built->run().module();
  const auto& placement = *built->st->placement;

  std::map<std::string, int64_t> planned;  // unit id -> parameters
  planned[plan.input.input.stem.id] += plan.input.input.stem.paramCount;
  for (const auto& b : plan.input.input.blocks) planned[b.id] += b.paramCount;
  planned[plan.input.input.head.id] += plan.input.input.head.paramCount;
  ASSERT_EQ(planned.size(), plan.input.input.blocks.size() + 2) << "unit ids are distinct";

  // Every parameter and buffer by the unit that owns it; each tensor counted once.
  std::map<std::string, int64_t> params, bytes;
  int64_t total = 0, totalBytes = 0;
  std::set<const void*> seen;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    ASSERT_TRUE(seen.insert(p.value().unsafeGetTensorImpl()).second) << p.key() << " is listed twice";
    const std::string owner = placement.ownerOf(p.key());
    params[owner] += p.value().numel();
    bytes[owner] += p.value().numel() * static_cast<int64_t>(p.value().element_size());
    total += p.value().numel();
    totalBytes += p.value().numel() * static_cast<int64_t>(p.value().element_size());
  }
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    const std::string owner = placement.ownerOf(b.key());
    bytes[owner] += b.value().numel() * static_cast<int64_t>(b.value().element_size());
    totalBytes += b.value().numel() * static_cast<int64_t>(b.value().element_size());
  }
  int64_t plannedTotal = 0;
  for (const auto& [id, n] : planned) plannedTotal += n;
  EXPECT_EQ(plannedTotal, total) << "planned parameters = the built model's";
  for (const auto& [id, n] : planned) EXPECT_EQ(params[id], n) << "unit " << id;
  for (const auto& [id, n] : params) EXPECT_TRUE(planned.count(id)) << id << " owns parameters but is not planned";

  // The block list's units hold those tensors and nothing else, none twice.
  int64_t snapshotBytes = 0;
  for (const auto& d : placement.snapshot().devices)
    for (const auto& b : d.blocks) {
      EXPECT_EQ(b.weightBytes, bytes[b.id]) << "unit " << b.id;
      snapshotBytes += b.weightBytes;
    }
  EXPECT_EQ(snapshotBytes, totalBytes) << "the block list covers every parameter and buffer exactly once";

  // The LoRA adapters the plan counts per unit are those the run's network makes.
  lora::LoraConfig lc;
  lc.rank = cfg.network.linear;
  lc.alpha = cfg.network.linearAlpha;
  lc.targetModules = cfg.network.targetModules;
  const auto net = lora::LoraNetwork::create(model, lc, built->run().loraRules());
  std::map<std::string, int> adapters;
  for (const auto& a : net->adapters()) ++adapters[placement.ownerOf(a->hostPath())];
  std::map<std::string, int> plannedAdapters;
  for (const auto& [id, n] : plan.input.adapters)
    if (n > 0) plannedAdapters[id] = n;
  EXPECT_EQ(adapters, plannedAdapters);
}

// Every module an adapter sits on, written in each of the family's file forms and
// read back: the same modules, the same deltas (fused forms split and joined again).
TEST_P(FamilyConformance, LoraNamesRoundTripInEveryFileForm) {
  const auto cfg = tinyRun();
  auto built = buildRun(family(), cfg);
  const auto& rules = built->run().loraRules();
  lora::LoraConfig lc;
  lc.rank = cfg.network.linear;
  lc.alpha = cfg.network.linearAlpha;
  lc.targetModules = cfg.network.targetModules;
  at::manual_seed(3);
  const auto net = lora::LoraNetwork::create(built->run().module(), lc, rules);
  auto modules = net->moduleWeights();
  for (auto& m : modules) m.up = at::randn(m.up.sizes());  // a fresh up is zero: nothing would be checked
  const auto expected = deltasOf(modules);
  ASSERT_FALSE(rules.formats().empty());
  for (const auto format : rules.formats()) {
    const std::string form = nn::toString(format);
    std::map<std::string, at::Tensor> tensors;
    for (auto& [key, t] : lora::loraTensorsForExport(modules, format, rules)) {
      ASSERT_TRUE(tensors.emplace(key, t).second) << form << ": key " << key << " written twice";
      // The file key's stem names the module(s) again, in this form.
      for (const std::string suffix :
           {".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight", ".alpha"}) {
        if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
        const auto match = rules.matchStem(key.substr(0, key.size() - suffix.size()));
        ASSERT_TRUE(match.has_value()) << form << ": " << key;
        EXPECT_EQ(match->format, format) << form << ": " << key;
        EXPECT_FALSE(match->modules.empty()) << form << ": " << key;
        for (const auto& [path, slot] : match->modules) {
          const auto back = rules.slotOf(path, format);
          ASSERT_TRUE(back.has_value()) << form << ": " << path;
          EXPECT_EQ(back->stem + suffix, key) << form << ": " << path;
        }
        break;
      }
    }
    const auto content = lora::convertLoraTensors(tensors, {}, rules, {}, form);
    EXPECT_EQ(content.format, format);
    expectSameDeltas(deltasOf(content.modules), expected, form);
  }
}

// A run stopped halfway and resumed ends with the LoRA of a straight run.
// FamilyRun::microBatchShapeChange (train.cuda_graph: auto graphs only where it is ""):
// where the family says its micro-batches keep one shape, the micro-batches it draws do;
// the tiny run (one dataset of one size) says so; a second dataset of another size
// (twice the resolution and the row length) makes it say why not, except where the
// family makes the shapes one itself (Llama pads every batch with cuda_graph: true).
TEST_P(FamilyConformance, MicroBatchesKeepTheShapeTheFamilySaysTheyKeep) {
  auto shapesOf = [](const std::vector<at::Tensor>& batch) {
    std::vector<std::vector<int64_t>> out;
    for (const auto& t : batch) out.push_back(t.sizes().vec());
    return out;
  };
  auto check = [&](const config::RunConfig& cfg, const std::string& what) {
    auto b = buildRun(family(), cfg);
    const std::string change = b->run().microBatchShapeChange();
    std::set<std::vector<std::vector<int64_t>>> seen;
    for (int64_t step = 1; step <= 6; ++step) {
      b->st->drawStep = step;
      seen.insert(shapesOf(b->run().microBatch(*b->context, std::max<int64_t>(cfg.train.batchSize, 1), step)));
    }
    if (change.empty()) EXPECT_EQ(seen.size(), 1u) << what << ": the family said one shape";
    return std::make_pair(change, seen.size());
  };
  const auto tiny = tinyRun();
  const auto [tinyChange, tinyShapes] = check(tiny, "the tiny run");
  EXPECT_EQ(tinyChange, "") << "the tiny run has one dataset of one size";
  auto two = tinyRun();
  auto other = two.datasets.front();
  for (auto& r : other.resolution) r *= 2;
  other.maxSeqLen *= 2;
  two.datasets.push_back(other);
  two.train.cudaGraph = config::CudaGraphMode::Auto;
  const auto [twoChange, twoShapes] = check(two, "two datasets of two sizes");
  EXPECT_NE(twoChange, "") << "two sizes, " << twoShapes << " shapes drawn";
  EXPECT_GT(twoShapes, 1u);
  two.train.cudaGraph = config::CudaGraphMode::On;
  const auto [padded, paddedShapes] = check(two, "two sizes with cuda_graph: true");
  std::cout << "[" << GetParam() << "] two sizes: auto: " << twoChange
            << "; true: " << (padded.empty() ? "one shape" : padded) << " (" << paddedShapes << " shapes drawn)\n";
}

TEST_P(FamilyConformance, StopAndResumeEndWhereAStraightRunEnds) {
  const auto cfg = tinyRun();
  ASSERT_GE(cfg.train.steps, 2);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  train::TrainerOptions a;
  a.runDir = tmp_ / "straight";
  ASSERT_EQ(train::Trainer(cfg, bus, a).run(), train::RunOutcome::Finished) << rec.failures();
  train::TrainerOptions b;
  b.runDir = tmp_ / "split";
  b.stopAfterStep = cfg.train.steps / 2;
  ASSERT_EQ(train::Trainer(cfg, bus, b).run(), train::RunOutcome::Stopped) << rec.failures();
  ASSERT_EQ(train::Trainer::resumeFrom(b.runDir, bus)->run(), train::RunOutcome::Finished) << rec.failures();
  const train::RunFolder fa(a.runDir), fb(b.runDir);
  ASSERT_TRUE(fa.latestCheckpoint() && fb.latestCheckpoint());
  ASSERT_EQ(fa.latestCheckpoint()->step, cfg.train.steps);
  ASSERT_EQ(fb.latestCheckpoint()->step, cfg.train.steps);
  const auto la = io::loadSafetensors(fa.latestCheckpoint()->path / "lora.safetensors");
  const auto lb = io::loadSafetensors(fb.latestCheckpoint()->path / "lora.safetensors");
  ASSERT_EQ(la.size(), lb.size());
  double moved = 0;
  for (const auto& [k, t] : la) {
    ASSERT_TRUE(lb.count(k)) << k;
    EXPECT_TRUE(test::allClose(lb.at(k), t, 1e-6, 1e-5)) << k;
    if (k.find("lora_B") != std::string::npos) moved += t.abs().sum().item<double>();
  }
  EXPECT_GT(moved, 0.0) << "the LoRA did train";
}

namespace {

// The LoRA of an export at `path` (a file, or a peft adapter folder: its weights, alpha in its config).
std::vector<lora::LoraModuleWeights> readExport(const fs::path& path, const nn::LoraNameRules& rules) {
  lora::LoraLoadOptions lo;
  fs::path file = path;
  if (fs::is_directory(path)) {
    file = path / "adapter_model.safetensors";
    std::ifstream in(path / "adapter_config.json");
    lo.alpha = nlohmann::json::parse(in).at("lora_alpha").get<double>();
  }
  return lora::readLoraFile(file, rules, lo).modules;
}

}  // namespace

// Every form the run exports, and every form the family writes from a checkpoint
// (strata-train export), loads back through the family's rules equal to the live
// weights (the final checkpoint's LoRA; the tiny run has no EMA).
TEST_P(FamilyConformance, EveryExportLoadsBackEqualToTheLiveWeights) {
  const auto cfg = tinyRun();
  ASSERT_FALSE(cfg.train.ema.useEma);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  train::TrainerOptions o;
  o.runDir = tmp_ / "run";
  ASSERT_EQ(train::Trainer(cfg, bus, o).run(), train::RunOutcome::Finished) << rec.failures();
  const train::RunFolder folder(o.runDir);
  const auto live =
      lora::moduleWeightsFromStateDict(io::loadSafetensors(folder.latestCheckpoint()->path / "lora.safetensors"),
                                       family().checkpointPrefix(), cfg.network.linearAlpha, "checkpoint");
  ASSERT_FALSE(live.empty());
  const auto expected = deltasOf(live);
  const auto built = buildRun(family(), cfg);  // the rules of the run's model
  const auto& rules = built->run().loraRules();
  ASSERT_FALSE(cfg.save.exportFormats.empty());
  for (const auto format : cfg.save.exportFormats) {
    const std::string form = config::enumName(format);
    EXPECT_EQ(family().formatProblem(format), "") << form;
    const fs::path path = family().exportPathIn(folder.exportsDir(), cfg, format, std::nullopt);
    ASSERT_TRUE(fs::exists(path)) << path;
    expectSameDeltas(deltasOf(readExport(path, rules)), expected, "the run's " + form + " export");
  }
  int written = 0;
  for (const auto& n : config::EnumTraits<config::ExportFormat>::kNames) {
    if (n.alias || !family().formatProblem(n.value).empty()) continue;
    const fs::path path = family().exportPathIn(tmp_ / "out" / n.name, cfg, n.value, cfg.train.steps);
    fs::create_directories(path.parent_path());
    family().exportModules(live, cfg, n.value, path, cfg.train.steps, "conformance");
    expectSameDeltas(deltasOf(readExport(path, rules)), expected, std::string("exportModules ") + n.name);
    ++written;
  }
  EXPECT_GT(written, 0);
}

INSTANTIATE_TEST_SUITE_P(Registered, FamilyConformance, ::testing::ValuesIn(registeredArchs()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
