// File > New's templates come from the families (ModelFamily::templates): each is
// a shipped file under configs/ that reads, of its family, with no path relative
// to the project folder; FLUX.1 and Llama each have one for the user's own data,
// whose data key is left for the user to set.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "device/DeviceSelection.h"
#include "train/ConfigTemplates.h"
#include "train/RunPlanning.h"

using namespace strata;
namespace fs = std::filesystem;

TEST(ConfigTemplates, EachFamilysTemplatesAreShippedFilesOfThatFamily) {
  for (const std::string arch : {"flux", "flux2", "llama"}) {
    const auto templates = train::configTemplates(arch);
    ASSERT_FALSE(templates.empty()) << arch;
    bool ownData = false;
    for (const auto& t : templates) {
      const fs::path file = test::sourceDir() / "configs" / t.file;
      ASSERT_TRUE(fs::exists(file)) << file;
      const auto loaded = config::loadRunConfig(file);
      for (const auto& p : loaded.problems) EXPECT_FALSE(p.isError() && p.line == 0 && p.key.empty()) << p.format();
      EXPECT_EQ(loaded.config.model.arch, arch) << t.id;
      // Nothing points into the project folder: the app is installed elsewhere.
      EXPECT_NE(loaded.config.model.nameOrPath.rfind("configs/", 0), 0u) << t.id;
      for (const auto& d : loaded.config.datasets) {
        EXPECT_NE(d.folderPath.rfind("configs/", 0), 0u) << t.id;
        EXPECT_NE(d.filePath.rfind("configs/", 0), 0u) << t.id;
      }
      if (!t.dataKey.empty()) {
        ownData = true;
        EXPECT_FALSE(t.dataQuestion.empty()) << t.id;
        EXPECT_FALSE(t.modelQuestion.empty()) << t.id;
        EXPECT_EQ(t.modelKey, "model.name_or_path") << t.id;
        EXPECT_FALSE(loaded.config.model.randomWeights) << t.id;
        EXPECT_TRUE(loaded.config.model.nameOrPath.empty()) << t.id;  // the user's model, picked by the user
        ASSERT_FALSE(loaded.config.datasets.empty()) << t.id;
        const auto& d = loaded.config.datasets.front();
        EXPECT_TRUE((t.dataIsFolder ? d.folderPath : d.filePath).empty()) << t.id;
        EXPECT_GT(loaded.config.save.exportEvery, 0) << t.id;  // a LoRA at every save, to compare them
      }
    }
    if (arch != std::string("flux2")) EXPECT_TRUE(ownData) << arch << " has no template for own data";
  }
}

// The own-images templates fit the cards their titles name (planned from shapes alone).
TEST(ConfigTemplates, OwnImageTemplatesFitTheCardsTheyName) {
  for (const auto& [file, devices] : {std::pair<std::string, std::string>{"flux-my-images-1gpu.yaml", "1x24GB"},
                                      {"flux-my-images-4x16gb.yaml", "4x16GB"},
                                      {"flux2-klein-9b-my-images-16gb.yaml", "1x16GB"}}) {
    const auto loaded = config::loadRunConfig(test::sourceDir() / "configs" / file);
    train::PrepareOptions preview;
    preview.preview = true;
    const auto run = train::prepareRun(loaded.config, device::simulatedInventory(devices), preview);
    std::string problems;
    for (const auto& p : run.problems)
      if (p.isError()) problems += p.format() + "\n";
    ASSERT_TRUE(run.ok()) << file << "\n" << problems;
    EXPECT_TRUE(run.plan.fits) << file << ": " << run.plan.reason;
    EXPECT_TRUE(train::planRefusal(run).empty()) << file;
  }
}
