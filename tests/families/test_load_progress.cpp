// A FLUX images run streams its weights in block by block and says so: T5 (while
// the captions are cached, quantized with model.quantize_te or not) and then the
// transformer publish LoadProgressEvent per block, 1..blocks+1 of blocks+1, all
// before the run starts; a second run over a complete cache never reads T5. The
// fixture is the flux_pipeline_a diffusers folder; the block counts come from its
// config files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "config/RunConfig.h"
#include "events/EventBus.h"
#include "io/Image.h"
#include "models/flux/FluxConfig.h"
#include "models/t5/T5Checkpoint.h"
#include "train/Trainer.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

fs::path modelDir() { return test::referenceDir() / "flux_pipeline_a" / "model"; }

// uint8 [H, W, 3] with some structure (a gradient and a block that moves with `seed`).
at::Tensor picture(int64_t h, int64_t w, int seed) {
  auto x = at::arange(w, at::kFloat).mul(255.0 / static_cast<double>(w)).view({1, w, 1}).expand({h, w, 1});
  auto y = at::arange(h, at::kFloat).mul(255.0 / static_cast<double>(h)).view({h, 1, 1}).expand({h, w, 1});
  auto img = at::cat({x, y, at::full({h, w, 1}, 40.0 * seed)}, 2).round().to(at::kByte).contiguous();
  img.slice(0, seed * 3, seed * 3 + h / 3).slice(1, seed * 5, seed * 5 + w / 3).fill_(230);
  return img;
}

// The order and figures of the load events of one component.
struct Loads {
  std::vector<int64_t> done;
  int64_t total = -1;
  bool totalsAgree = true;
  size_t firstAt = 0, lastAt = 0;  // indexes into the whole event stream
};

struct Recorded {
  std::map<std::string, Loads> loads;
  size_t startedAt = 0;
  bool started = false;
  std::string failure;
  size_t count = 0;
  void operator()(const events::Event& e) {
    const size_t at = count++;
    if (const auto* p = std::get_if<events::LoadProgressEvent>(&e)) {
      Loads& l = loads[p->what];
      if (l.done.empty()) {
        l.total = p->total;
        l.firstAt = at;
      }
      l.totalsAgree = l.totalsAgree && l.total == p->total;
      l.done.push_back(p->done);
      l.lastAt = at;
    }
    if (std::holds_alternative<events::StartedEvent>(e) && !started) {
      started = true;
      startedAt = at;
    }
    if (const auto* f = std::get_if<events::FailedEvent>(&e)) failure += f->message;
    if (const auto* f = std::get_if<events::PreflightFailedEvent>(&e))
      for (const auto& p : f->problems) failure += p + "\n";
  }
};

class LoadProgress : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(modelDir() / "model_index.json")) GTEST_SKIP() << "no flux_pipeline_a fixture at " << modelDir();
    for (int i = 0; i < 3; ++i) {
      io::writePng(images_ / ("p" + std::to_string(i) + ".png"), picture(40, 48, i + 1));
      std::ofstream(images_ / ("p" + std::to_string(i) + ".txt")) << "a picture number " << i;
    }
    const auto flux = flux::FluxConfig::fromDiffusersJsonFile(modelDir() / "transformer" / "config.json");
    transformerUnits_ = flux.numLayers + flux.numSingleLayers + 1;  // the blocks, then the rest
    t5Units_ = t5::T5Checkpoint::open(modelDir() / "text_encoder_2").config().numLayers + 1;
  }

  config::RunConfig runConfig(const std::string& name) const {
    config::RunConfig c;
    c.job.name = name;
    c.job.trainingFolder = out_.path().string();
    c.model.nameOrPath = modelDir().string();
    c.model.device = config::ComputeDevice::Cpu;
    c.network.linear = 2;
    c.network.linearAlpha = 2;
    c.train.steps = 1;
    c.train.dtype = config::DType::FP32;
    c.train.gradientCheckpointing = false;
    config::DatasetConfig d;
    d.type = config::DatasetType::Images;
    d.folderPath = images_.path().string();
    d.resolution = {32};
    c.datasets = {d};
    c.sample.sampleEvery = 0;
    c.sample.prompts.clear();
    c.save.saveEvery = 0;
    c.save.exportFormats.clear();
    return c;
  }

  Recorded run(const config::RunConfig& cfg) {
    Recorded rec;
    events::EventBus bus;
    auto sub = bus.subscribe([&rec](const events::Event& e) { rec(e); });
    train::Trainer t(cfg, bus);
    const auto outcome = t.run();
    EXPECT_EQ(outcome, train::RunOutcome::Finished) << rec.failure;
    return rec;
  }

  // 1, 2, ..., units: every block once and in order, then the rest of the model.
  static std::vector<int64_t> oneByOne(int64_t units) {
    std::vector<int64_t> v;
    for (int64_t i = 1; i <= units; ++i) v.push_back(i);
    return v;
  }

  test::TempDir images_, out_;
  int64_t transformerUnits_ = 0, t5Units_ = 0;
};

TEST_F(LoadProgress, T5ThenTheTransformerSayHowFarTheyAreBeforeTheRunStarts) {
  for (const bool quantizeTe : {false, true}) {
    SCOPED_TRACE(quantizeTe ? "quantize_te int8" : "float T5");
    config::RunConfig cfg = runConfig(quantizeTe ? "q" : "f");
    cfg.model.quantizeTe = quantizeTe;
    cfg.model.qtype = "int8";
    // Each its own cache: a quantized T5's embeddings are not a float one's, so both read T5.
    cfg.datasets.front().cacheLatentsToDisk = false;
    const Recorded rec = run(cfg);
    ASSERT_TRUE(rec.started) << rec.failure;
    ASSERT_EQ(rec.loads.count(events::kLoadT5), 1u);
    ASSERT_EQ(rec.loads.count(events::kLoadTransformer), 1u);
    EXPECT_EQ(rec.loads.size(), 2u);
    const Loads& t5 = rec.loads.at(events::kLoadT5);
    const Loads& tr = rec.loads.at(events::kLoadTransformer);
    EXPECT_EQ(t5.total, t5Units_);
    EXPECT_TRUE(t5.totalsAgree);
    EXPECT_EQ(t5.done, oneByOne(t5Units_));
    EXPECT_EQ(tr.total, transformerUnits_);
    EXPECT_TRUE(tr.totalsAgree);
    EXPECT_EQ(tr.done, oneByOne(transformerUnits_));
    // T5 fills the caption cache (prepareData) before the transformer is built, and both before step 1.
    EXPECT_LT(t5.lastAt, tr.firstAt);
    EXPECT_LT(tr.lastAt, rec.startedAt);
  }
}

TEST_F(LoadProgress, ACompleteCacheNeverLoadsT5) {
  config::RunConfig cfg = runConfig("first");
  cfg.datasets.front().cacheLatentsToDisk = true;
  const Recorded first = run(cfg);
  EXPECT_EQ(first.loads.count(events::kLoadT5), 1u) << first.failure;
  cfg.job.name = "second";
  const Recorded second = run(cfg);
  EXPECT_EQ(second.loads.count(events::kLoadT5), 0u) << "T5 read although every caption was cached";
  EXPECT_EQ(second.loads.count(events::kLoadTransformer), 1u) << second.failure;
}

}  // namespace
