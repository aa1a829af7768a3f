// The trainer's seams (issue 33 point 4): the reduce point of every optimizer step
// (train/GradientReducer.h) and the run folder's one writer (train/RunSink.h), on
// the tiny FLUX-architecture model on the CPU.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "common/TrainTestSupport.h"
#include "events/EventBus.h"
#include "io/Safetensors.h"
#include "train/GradientReducer.h"
#include "train/RunFolder.h"
#include "train/RunSink.h"
#include "train/Trainer.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {

config::RunConfig seamsConfig(const fs::path& folder, int64_t steps) {
  auto c = test::tinyCpuRun("seams", folder, steps);
  c.train.seed = 7;
  c.train.gradientAccumulationSteps = 2;
  c.train.weightDecay = 0.0;
  c.datasets = {test::shapesDataset(16, 8)};
  c.save.saveEvery = 0;
  return c;
}

std::map<std::string, at::Tensor> finalLora(const fs::path& runDir) {
  const auto latest = RunFolder(runDir).latestCheckpoint();
  EXPECT_TRUE(latest.has_value());
  return latest ? io::loadSafetensors(latest->path / "lora.safetensors") : std::map<std::string, at::Tensor>{};
}

// Counts its calls and what each saw; changes nothing.
class CountingReducer : public GradientReducer {
 public:
  void reduce(StepGradients& step) override {
    ++calls;
    lossesPerCall.push_back(step.losses.size());
    int64_t withGrad = 0;
    for (const auto& p : step.params)
      if (p.grad().defined()) ++withGrad;
    gradsPerCall.push_back(withGrad);
    paramsPerCall.push_back(static_cast<int64_t>(step.params.size()));
  }
  int64_t calls = 0;
  std::vector<size_t> lossesPerCall;
  std::vector<int64_t> gradsPerCall, paramsPerCall;
};

// What an all-reduce over replicas whose gradients sum to zero would leave.
class ZeroingReducer : public GradientReducer {
 public:
  void reduce(StepGradients& step) override {
    for (const auto& p : step.params)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
};

// A replica whose loss came back NaN from the collective.
class NanLossReducer : public GradientReducer {
 public:
  void reduce(StepGradients& step) override {
    step.losses.front() = at::full_like(step.losses.front(), std::numeric_limits<double>::quiet_NaN());
  }
};

}  // namespace

TEST(TrainerSeams, TheReducePointIsCalledOncePerOptimizerStepAfterEveryMicroBatch) {
  test::TempDir tmp;
  const auto cfg = seamsConfig(tmp.path(), 3);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });

  auto counting = std::make_shared<CountingReducer>();
  TrainerOptions o;
  o.runDir = tmp / "counted";
  o.reducer = counting;
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.text();
  EXPECT_EQ(counting->calls, 3);  // 3 optimizer steps of 2 micro-batches each
  for (int64_t i = 0; i < counting->calls; ++i) {
    const auto k = static_cast<size_t>(i);
    EXPECT_EQ(counting->lossesPerCall[k], 2u) << "call " << i;  // after the last micro-batch
    EXPECT_GT(counting->paramsPerCall[k], 0);
    EXPECT_EQ(counting->gradsPerCall[k], counting->paramsPerCall[k]) << "call " << i;
  }

  // The default (the empty collective) and a reducer that changes nothing train the same LoRA, bit for bit.
  TrainerOptions plain;
  plain.runDir = tmp / "plain";
  ASSERT_EQ(Trainer(cfg, bus, plain).run(), RunOutcome::Finished) << rec.text();
  const auto a = finalLora(tmp / "counted");
  const auto b = finalLora(tmp / "plain");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (const auto& [k, t] : a) EXPECT_TRUE(t.equal(b.at(k))) << k;
}

TEST(TrainerSeams, TheOptimizerStepsWithWhatLeavesTheReducePoint) {
  test::TempDir tmp;
  const auto cfg = seamsConfig(tmp.path(), 2);
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });

  // Zero gradients out of the reduce point: the up matrices (zero at init) stay zero.
  TrainerOptions zeroed;
  zeroed.runDir = tmp / "zeroed";
  zeroed.reducer = std::make_shared<ZeroingReducer>();
  ASSERT_EQ(Trainer(cfg, bus, zeroed).run(), RunOutcome::Finished) << rec.text();
  TrainerOptions plain;
  plain.runDir = tmp / "plain";
  ASSERT_EQ(Trainer(cfg, bus, plain).run(), RunOutcome::Finished) << rec.text();
  double zeroedUp = 0.0, plainUp = 0.0;
  int64_t ups = 0;
  const auto z = finalLora(tmp / "zeroed");
  const auto p = finalLora(tmp / "plain");
  for (const auto& [k, t] : z)
    if (k.find("lora_B") != std::string::npos) {
      ++ups;
      zeroedUp += t.abs().sum().item<double>();
      plainUp += p.at(k).abs().sum().item<double>();
    }
  ASSERT_GT(ups, 0);
  EXPECT_EQ(zeroedUp, 0.0);
  EXPECT_GT(plainUp, 0.0);

  // A loss made NaN at the reduce point stops the run as a NaN loss does.
  events::EventBus nanBus;
  test::EventRecorder nanRec;
  auto nanSub = nanBus.subscribe([&](const events::Event& e) { nanRec(e); });
  TrainerOptions nan;
  nan.runDir = tmp / "nan";
  nan.reducer = std::make_shared<NanLossReducer>();
  ASSERT_EQ(Trainer(cfg, nanBus, nan).run(), RunOutcome::Failed);
  EXPECT_NE(nanRec.failures().find("loss is NaN at step 1"), std::string::npos) << nanRec.text();
}

namespace {

// A RunSink that records every write it is asked for, then does it.
class RecordingSink : public RunSink {
 public:
  using RunSink::RunSink;
  void create(bool withSaves) override {
    writes.push_back("create");
    RunSink::create(withSaves);
  }
  void writeConfig(const std::string& yaml) override {
    written.insert(folder().configPath());
    RunSink::writeConfig(yaml);
  }
  void truncateLogsAfter(int64_t step) override {
    writes.push_back("truncate");
    RunSink::truncateLogsAfter(step);
  }
  void appendMetrics(const nlohmann::json& line) override {
    ++metricsLines;
    written.insert(folder().metricsPath());
    RunSink::appendMetrics(line);
  }
  void writeCheckpoint(const CheckpointData& data, int64_t keep, std::string& path) override {
    RunSink::writeCheckpoint(data, keep, path);
    checkpoints.push_back(data.step);
    written.insert(path);
  }
  fs::path writeSample(int64_t step, int64_t promptIndex, const Sample& sample) override {
    const fs::path path = RunSink::writeSample(step, promptIndex, sample);
    ++samples;
    written.insert(path);
    written.insert(folder().samplesIndexPath());
    return path;
  }
  void writeExport(const fs::path& path, const std::string& format, int64_t step,
                   const std::function<void(const fs::path&)>& write) override {
    RunSink::writeExport(path, format, step, write);
    exports.push_back(path);
    written.insert(path);
  }

  std::vector<std::string> writes;
  std::set<fs::path> written;  // files and checkpoint folders
  int64_t metricsLines = 0;
  int64_t samples = 0;
  std::vector<int64_t> checkpoints;
  std::vector<fs::path> exports;
};

}  // namespace

TEST(TrainerSeams, EveryWriteOfTheRunFolderGoesThroughTheSink) {
  test::TempDir tmp;
  auto cfg = seamsConfig(tmp.path(), 4);
  cfg.save.saveEvery = 2;
  cfg.save.exportEvery = 3;
  cfg.sample.sampleEvery = 2;
  cfg.sample.prompts = {"a red circle", ""};
  cfg.sample.sampleSteps = 2;
  cfg.sample.width = 64;
  cfg.sample.height = 64;
  events::EventBus bus;
  test::EventRecorder rec;
  auto sub = bus.subscribe([&](const events::Event& e) { rec(e); });
  std::shared_ptr<RecordingSink> sink;
  TrainerOptions o;
  o.runDir = tmp / "run";
  o.makeSink = [&](const fs::path& dir, events::EventBus& b) {
    sink = std::make_shared<RecordingSink>(dir, b);
    return sink;
  };
  ASSERT_EQ(Trainer(cfg, bus, o).run(), RunOutcome::Finished) << rec.text();
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->metricsLines, 4);
  EXPECT_EQ(sink->checkpoints, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(sink->samples, 6);          // 2 prompts at steps 0, 2 and 4
  ASSERT_EQ(sink->exports.size(), 2u);  // step 3's and the final one
  // The sink's events are those of its writes.
  EXPECT_EQ(rec.of<events::SampleEvent>().size(), 6u);
  EXPECT_EQ(rec.of<events::CheckpointEvent>().size(), 2u);
  EXPECT_EQ(rec.of<events::ExportEvent>().size(), 2u);

  // Every file in the run folder is one the sink wrote (or inside a checkpoint it
  // wrote), besides the folder's lock.
  const fs::path root = tmp / "run";
  int64_t files = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path p = it->path();
    if (sink->written.count(p) && it->is_directory()) {
      it.disable_recursion_pending();  // a checkpoint folder the sink wrote
      continue;
    }
    if (!it->is_regular_file()) continue;
    ++files;
    if (p == root / ".lock") continue;
    EXPECT_TRUE(sink->written.count(p)) << p << " was written past the sink";
  }
  EXPECT_GE(files, 1 + 1 + 1 + 6 + 2);  // config, metrics, samples index, samples, exports
}
