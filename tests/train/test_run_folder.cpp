// Run folder, checkpoints, datasets, the demo's pixel code and sample PNGs.
#include <gtest/gtest.h>

#include <fstream>

#include "common/Error.h"
#include "io/Safetensors.h"
#include "common/TestSupport.h"
#include "train/Datasets.h"
#include "train/RunFolder.h"
#include "train/TextEmbedder.h"

using namespace strata;
using namespace strata::train;
namespace fs = std::filesystem;

namespace {
CheckpointData fakeCheckpoint(int64_t step) {
  CheckpointData d;
  d.step = step;
  d.lora = {{"transformer.a.lora_A.weight", at::full({2, 3}, static_cast<float>(step))}};
  d.optimizer = {{"a.lora_A.weight.exp_avg", at::zeros({2, 3})},
                 {"a.lora_A.weight.exp_avg_sq", at::zeros({2, 3})},
                 {"a.lora_A.weight.step", at::full({1}, step, at::kLong)}};
  d.rng = {{"rng.trainer", at::zeros({8}, at::kByte)}};
  d.state = {{"draw_cursor", step * 2}};
  return d;
}
}  // namespace

TEST(RunFolder, CheckpointsAreWrittenReadAndPruned) {
  test::TempDir tmp;
  RunFolder f(tmp.path() / "run");
  f.create();
  for (int64_t s : {10, 20, 30}) writeCheckpoint(f, fakeCheckpoint(s));
  auto all = f.checkpoints();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.back().step, 30);
  const auto d = readCheckpoint(all[1].path);
  EXPECT_EQ(d.step, 20);
  EXPECT_EQ(d.state["draw_cursor"].get<int64_t>(), 40);
  EXPECT_FLOAT_EQ(d.lora.at(0).second[0][0].item<float>(), 20.0f);
  const auto removed = pruneCheckpoints(f, 2);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(f.checkpoints().front().step, 20);
  EXPECT_EQ(f.latestCheckpoint()->step, 30);
}

// "Save now" checkpoints are the user's: the keep-N rule prunes only the rolling ones.
TEST(RunFolder, ManualCheckpointsAreNotPruned) {
  test::TempDir tmp;
  RunFolder f(tmp.path() / "run");
  f.create();
  writeCheckpoint(f, fakeCheckpoint(10));
  auto manual = fakeCheckpoint(15);
  manual.manual = true;
  writeCheckpoint(f, manual);
  for (int64_t s : {20, 30, 40}) writeCheckpoint(f, fakeCheckpoint(s));
  const auto removed = pruneCheckpoints(f, 2);
  ASSERT_EQ(removed.size(), 2u);  // steps 10 and 20; 15 is manual and does not count
  std::vector<int64_t> steps;
  for (const auto& c : f.checkpoints()) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{15, 30, 40}));
  EXPECT_TRUE(f.checkpoints().front().manual);
  EXPECT_FALSE(f.checkpoints().back().manual);
  EXPECT_TRUE(readCheckpoint(f.checkpoints().front().path).manual);
  EXPECT_EQ(f.latestCheckpoint()->step, 40);
}

TEST(RunFolder, FailedCheckpointLeavesThePreviousIntact) {
  test::TempDir tmp;
  RunFolder f(tmp.path() / "run");
  f.create();
  writeCheckpoint(f, fakeCheckpoint(10));
  auto bad = fakeCheckpoint(20);
  // A tensor the writer refuses, after the LoRA file is already in the partial folder.
  bad.optimizer.emplace_back("x", at::zeros({2}, at::kComplexFloat));
  EXPECT_THROW(writeCheckpoint(f, bad), IoError);
  auto all = f.checkpoints();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].step, 10);
  EXPECT_EQ(readCheckpoint(all[0].path).step, 10);
  // No partial folder is left behind.
  for (const auto& e : fs::directory_iterator(f.checkpointsDir()))
    EXPECT_EQ(e.path().filename().string().rfind(".partial", 0), std::string::npos) << e.path();
}

TEST(RunFolder, ResaveOfTheSameStepReplacesIt) {
  test::TempDir tmp;
  RunFolder f(tmp.path() / "run");
  f.create();
  writeCheckpoint(f, fakeCheckpoint(10));
  auto again = fakeCheckpoint(10);
  again.state["draw_cursor"] = 99;
  writeCheckpoint(f, again);
  ASSERT_EQ(f.checkpoints().size(), 1u);
  EXPECT_EQ(readCheckpoint(f.checkpoints()[0].path).state["draw_cursor"].get<int64_t>(), 99);
}

TEST(RunFolder, MetricsAppendAndTruncateForResume) {
  test::TempDir tmp;
  RunFolder f(tmp.path() / "run");
  f.create();
  for (int s = 1; s <= 5; ++s) f.appendMetrics({{"step", s}, {"loss", 1.0 / s}});
  f.truncateLogsAfter(3);
  const auto lines = f.readMetrics();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines.back()["step"].get<int>(), 3);
}

TEST(PixelCode, RoundTripsExactly) {
  auto rgb = at::rand({3, 12, 8});
  auto lat = rgbToLatents(rgb);
  ASSERT_EQ(lat.sizes(), (std::vector<int64_t>{16, 6, 4}));
  EXPECT_TRUE(test::allClose(latentsToRgb(lat), rgb, 1e-6, 0));
  // Channel 0 is the red pixel at (0, 0) of each patch, mapped to [-1, 1].
  EXPECT_NEAR(lat[0][1][2].item<float>(), rgb[0][2][4].item<float>() * 2 - 1, 1e-6);
}

TEST(ShapesDataset, DeterministicItemsWithCaptions) {
  config::DatasetConfig dc;
  dc.type = config::DatasetType::Shapes;
  dc.resolution = {32};
  dc.numItems = 8;
  DatasetContext ctx;
  ctx.textTokens = 8;
  ctx.textDim = 24;
  ctx.pooledDim = 12;
  auto ds = makeDataset(dc, ctx, 0);
  ASSERT_EQ(ds->size(), 8u);
  const auto a = ds->item(3), b = ds->item(3), c = ds->item(4);
  EXPECT_TRUE(a.latents.equal(b.latents));
  EXPECT_EQ(a.caption, b.caption);
  EXPECT_EQ(a.latents.sizes(), (std::vector<int64_t>{16, 16, 16}));
  EXPECT_EQ(a.txt.sizes(), (std::vector<int64_t>{8, 24}));
  EXPECT_NE(a.caption.find(" on a "), std::string::npos);
  EXPECT_FALSE(a.latents.equal(c.latents));
  // The empty prompt differs from every caption.
  EXPECT_FALSE(ds->emptyPrompt().txt.equal(a.txt));
}

TEST(ShapesDataset, RejectsBadResolution) {
  config::DatasetConfig dc;
  dc.type = config::DatasetType::Shapes;
  dc.resolution = {30};
  EXPECT_THROW(makeDataset(dc, DatasetContext{}, 2), ConfigError);
}

TEST(MakeDataset, JsonlIsALanguageModelsAndSaysSoWithTheKey) {
  config::DatasetConfig dc;
  dc.type = config::DatasetType::Jsonl;
  try {
    makeDataset(dc, DatasetContext{}, 1);
    ADD_FAILURE() << "jsonl made an image dataset";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("datasets[1].type"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("language model"), std::string::npos) << e.what();
  }
}

TEST(WordEmbedder, SharedWordsShareVectors) {
  WordEmbedder e(6, 10, 4);
  auto a = e.embed("A red circle"), b = e.embed("red square");
  EXPECT_TRUE(a.txt[2].equal(b.txt[1]));  // "red"
  EXPECT_FALSE(a.txt[3].equal(b.txt[2]));
  EXPECT_TRUE(e.embed("").pooled.equal(at::zeros({4})));
  EXPECT_TRUE(e.embed("x y z").txt.equal(e.embed("X, y; z").txt));
}

TEST(LatentsDataset, ReadsItemsAndThrowsForBrokenOnes) {
  test::TempDir tmp;
  io::writeSafetensors(tmp / "a.safetensors",
                       {{"latents", at::randn({16, 4, 6})}, {"txt", at::randn({5, 24})}, {"pooled", at::randn({12})}},
                       {{"caption", "hello"}});
  { std::ofstream(tmp / "b.safetensors") << "not a safetensors file"; }
  config::DatasetConfig dc;
  dc.type = config::DatasetType::Latents;
  dc.folderPath = tmp.path().string();
  DatasetContext ctx;
  ctx.textDim = 24;
  ctx.pooledDim = 12;
  auto ds = makeDataset(dc, ctx, 0);
  ASSERT_EQ(ds->size(), 2u);
  EXPECT_EQ(ds->item(0).caption, "hello");
  EXPECT_THROW(ds->item(1), IoError);
}
