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

// The own-images templates fit the cards their titles name (planned from shapes alone),
// FLUX.2-dev's also on two 24 GB cards (gpu_ids and the cap set for them): its caching
// phase splits the Mistral text encoder over the cards.
TEST(ConfigTemplates, OwnImageTemplatesFitTheCardsTheyName) {
  struct Case {
    std::string file, devices;
    std::vector<int> gpuIds;  // empty: the file's
    double capGb = 0;         // 0: the file's
  };
  for (const Case& k :
       {Case{"flux-my-images-1gpu.yaml", "1x24GB"}, Case{"flux-my-images-4x16gb.yaml", "4x16GB"},
        Case{"flux2-klein-9b-my-images-16gb.yaml", "1x16GB"}, Case{"flux2-dev-my-images-4x16gb.yaml", "4x16GB"},
        Case{"flux2-dev-my-images-4x16gb.yaml", "2x24GB", {0, 1}, 24.0}}) {
    const std::string& file = k.file;
    SCOPED_TRACE(file + " on " + k.devices);
    auto loaded = config::loadRunConfig(test::sourceDir() / "configs" / file);
    if (!k.gpuIds.empty()) loaded.config.model.gpuIds = k.gpuIds;
    if (k.capGb > 0) loaded.config.model.gpuMemoryLimitGb = {k.capGb};
    train::PrepareOptions preview;
    preview.preview = true;
    const auto run = train::prepareRun(loaded.config, device::simulatedInventory(k.devices), preview);
    std::string problems;
    for (const auto& p : run.problems)
      if (p.isError()) problems += p.format() + "\n";
    ASSERT_TRUE(run.ok()) << file << "\n" << problems;
    EXPECT_TRUE(run.plan.fits) << file << ": " << run.plan.reason;
    EXPECT_TRUE(train::planRefusal(run).empty()) << file;
    if (file.rfind("flux2-dev", 0) == 0) {
      // The 24 B Mistral does not fit one of these cards: its layers are split over all of them.
      EXPECT_TRUE(loaded.config.model.quantize) << "the transformer is quantized";
      const auto& c = run.plan.caching;
      EXPECT_EQ(c.splitModule, "text encoder") << run.plan.reason;
      ASSERT_EQ(c.devices.size(), run.devices.size());
      for (const auto& cd : c.devices) {
        EXPECT_GT(cd.endLayer, cd.firstLayer) << cd.device << " runs some of its layers";
        EXPECT_EQ(cd.missingBytes, 0) << cd.device;
      }
    }
  }
}
