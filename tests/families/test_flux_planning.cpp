// families::fluxOtherModules without images to encode: no text encoders or VAE, and a
// note that says why for every dataset type that is not images (jsonl included, which
// the validator refuses for FLUX but a plan made without validating may still see);
// families::planTokenCounts: a latents dataset's tokens from its files' headers.
#include <gtest/gtest.h>

#include <string>

#include "common/TestSupport.h"
#include "device/DeviceSelection.h"
#include "families/flux/FluxPlanning.h"
#include "io/Safetensors.h"

using namespace strata;

TEST(FluxPlanning, EveryDatasetTypeWithoutImagesSaysWhyNoEncodersAreNeeded) {
  const std::pair<config::DatasetType, std::string> cases[] = {
      {config::DatasetType::Shapes, "shapes dataset"},
      {config::DatasetType::Synthetic, "synthetic dataset"},
      {config::DatasetType::Latents, "latents dataset"},
      {config::DatasetType::Jsonl, "jsonl dataset is text for a causal LM"},
  };
  for (const auto& [type, why] : cases) {
    config::RunConfig c;
    config::DatasetConfig d;
    d.type = type;
    c.datasets = {d};
    std::string note;
    EXPECT_TRUE(families::fluxOtherModules(c, "cpu", &note).empty()) << config::enumName(type);
    EXPECT_EQ(note.rfind("No text encoders or VAE: ", 0), 0u) << note;
    EXPECT_NE(note.find(why), std::string::npos) << note;
    EXPECT_EQ(note.back(), '.') << note;
  }
}

namespace {

// A latents file as the latents dataset reads it: latents [16, h, w], txt [n, 4096], pooled [768].
void writeLatents(const std::filesystem::path& path, int64_t h, int64_t w, int64_t textTokens = 512) {
  io::writeSafetensors(path, {{"latents", at::zeros({16, h, w}, at::kBFloat16)},
                              {"txt", at::zeros({textTokens, 4096}, at::kBFloat16)},
                              {"pooled", at::zeros({768}, at::kBFloat16)}});
}

config::RunConfig latentsRun(const std::filesystem::path& folder) {
  config::RunConfig c;
  config::DatasetConfig d;
  d.type = config::DatasetType::Latents;
  d.folderPath = folder.string();  // resolution left at its default (512)
  c.datasets = {d};
  return c;
}

}  // namespace

// The run takes a latents item's size from its file, never from datasets[].resolution:
// the plan reads it from the headers. 128 x 128 latents are 1024 px, packed 2x2 into
// 64 x 64 image tokens, plus the files' 512 text tokens (512 px would be 1024 + 512).
TEST(FluxPlanning, ALatentsDatasetIsPlannedAtItsFilesSizeNotItsResolution) {
  test::TempDir tmp;
  writeLatents(tmp / "a.safetensors", 128, 128);
  writeLatents(tmp / "b.safetensors", 128, 128);
  const config::RunConfig cfg = latentsRun(tmp.path());
  const auto fc = flux::FluxConfig::fluxDev();
  const families::PlannedTokens t = families::planTokenCounts(cfg, fc);
  EXPECT_EQ(t.image, 64 * 64);
  EXPECT_EQ(t.text, 512);
  EXPECT_EQ(families::planTokens(cfg, fc), 64 * 64 + 512);
  EXPECT_NE(t.note.find("its 2 latents files"), std::string::npos) << t.note;
  EXPECT_NE(t.note.find("128x128 (4096 image tokens)"), std::string::npos) << t.note;

  // The same through the run planner, which `strata-train plan` prints: the note is in the description.
  train::PrepareOptions po;
  po.preview = true;
  const train::PreparedRun run = train::prepareRun(cfg, device::simulatedInventory("1x80GB"), po);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run.tokens, 64 * 64 + 512);
  EXPECT_NE(train::describePlan(run).find(t.note), std::string::npos) << train::describePlan(run);
}

// Files of several sizes: the largest latents and the longest text are planned (a
// batch of one may be either); a file the loader would skip is left out and counted.
TEST(FluxPlanning, ALatentsFolderIsPlannedAtItsLargestItemAndSkipsWhatTheLoaderSkips) {
  test::TempDir tmp;
  writeLatents(tmp / "a.safetensors", 64, 64, 512);
  writeLatents(tmp / "b.safetensors", 96, 160, 256);
  io::writeSafetensors(tmp / "c.safetensors", {{"latents", at::zeros({4, 256, 256})}});  // no txt: skipped
  writeLatents(tmp / "empty_prompt.safetensors", 512, 512);  // the caption-dropout embedding, not an item
  const families::PlannedTokens t = families::planTokenCounts(latentsRun(tmp.path()), flux::FluxConfig::fluxDev());
  EXPECT_EQ(t.image, 48 * 80);
  EXPECT_EQ(t.text, 512);
  EXPECT_NE(t.note.find("its 2 latents files"), std::string::npos) << t.note;
  EXPECT_NE(t.note.find("1 files left out"), std::string::npos) << t.note;
}

// Where the folder cannot be read here (a plan for another machine), the plan falls
// back on datasets[i].resolution and says that the run will not read it.
TEST(FluxPlanning, AnUnreadableLatentsFolderIsPlannedFromResolutionAndSaysSo) {
  test::TempDir tmp;
  config::RunConfig cfg = latentsRun(tmp / "missing");
  cfg.datasets[0].resolution = {1024};
  const families::PlannedTokens t = families::planTokenCounts(cfg, flux::FluxConfig::fluxDev());
  EXPECT_EQ(t.image, 64 * 64);
  EXPECT_EQ(t.text, 512);
  EXPECT_NE(t.note.find((tmp / "missing").string()), std::string::npos) << t.note;
  EXPECT_NE(t.note.find("datasets[0].resolution (1024 px), which the run does not read"), std::string::npos) << t.note;

  // A folder with no usable file: the same fallback, with the file's problem.
  writeLatents(tmp / "bad.safetensors", 127, 128);  // odd height: the loader refuses it
  cfg.datasets[0].folderPath = tmp.path().string();
  const families::PlannedTokens bad = families::planTokenCounts(cfg, flux::FluxConfig::fluxDev());
  EXPECT_EQ(bad.image, 64 * 64);
  EXPECT_NE(bad.note.find("bad.safetensors: 'latents' must be [16, H, W] with even H, W"), std::string::npos)
      << bad.note;
}

// The other dataset types still plan from their resolution, with no tokens note.
TEST(FluxPlanning, ASyntheticDatasetIsPlannedFromItsResolution) {
  config::RunConfig cfg;
  config::DatasetConfig d;
  d.type = config::DatasetType::Synthetic;
  d.resolution = {1024};
  cfg.datasets = {d};
  const families::PlannedTokens t = families::planTokenCounts(cfg, flux::FluxConfig::fluxDev());
  EXPECT_EQ(t.total(), 64 * 64 + 512);
  EXPECT_TRUE(t.note.empty()) << t.note;
}
