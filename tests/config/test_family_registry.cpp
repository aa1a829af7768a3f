// Families describe themselves (config/FamilyRegistry.h): their key rows in the
// schema, model.arch as a registered id, the keys a family does not read (one list
// for the validator and the app), and a new family key as one row.
#include <gtest/gtest.h>

#include <algorithm>

#include "ConfigTestSupport.h"
#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
#include "config/KeyRows.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"

namespace strata::config {
namespace {

ptrdiff_t indexOf(const std::string& path) {
  const auto& keys = schema();
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i].path == path) return static_cast<ptrdiff_t>(i);
  return -1;
}

bool isShared(const std::string& path) {
  for (const KeySpec& k : sharedKeyRows())
    if (k.path == path) return true;
  return false;
}

ValidateOptions noPaths() {
  ValidateOptions o;
  o.checkPaths = false;
  return o;
}

TEST(FamilyRegistry, TheProgramsFamiliesAreRegisteredInTheChoosersOrder) {
  EXPECT_EQ(familyIds(), (std::vector<std::string>{"flux", "llama", "flux2"}));
  EXPECT_EQ(findKey("model.arch")->choices, familyIds());
  EXPECT_EQ(family("flux2").displayName, "FLUX.2");
  EXPECT_EQ(familyIdList(), "flux, llama, flux2");
}

TEST(FamilyRegistry, AFamilysKeyRowsAreInTheSchemaAfterTheKeyTheyName) {
  size_t rows = 0;
  for (const FamilyDescription* f : families())
    for (const KeyRow& row : f->keys) {
      ++rows;
      const KeySpec* k = findKey(row.spec.path);
      ASSERT_NE(k, nullptr) << f->id << ": " << row.spec.path;
      EXPECT_FALSE(isShared(row.spec.path)) << row.spec.path;
      ASSERT_FALSE(k->families.empty()) << row.spec.path;
      EXPECT_EQ(k->families.front(), f->id) << row.spec.path;
      EXPECT_FALSE(k->label.empty()) << row.spec.path;
      const ptrdiff_t anchor = indexOf(row.after);
      ASSERT_GE(anchor, 0) << row.spec.path << " follows " << row.after;
      EXPECT_GT(indexOf(row.spec.path), anchor) << row.spec.path;
    }
  EXPECT_GT(rows, 30u);
  // Every row is either shared (every family reads it) or a family's.
  EXPECT_EQ(schema().size(), sharedKeyRows().size() + rows);
  // FLUX.2 reads FLUX.1's single-file VAE key too; its text encoder folder is its own row.
  EXPECT_EQ(findKey("model.vae_path")->families, (std::vector<std::string>{"flux", "flux2"}));
  EXPECT_EQ(findKey("model.text_encoder_path")->families, (std::vector<std::string>{"flux2"}));
  EXPECT_EQ(findKey("datasets[].file_path")->families, (std::vector<std::string>{"llama"}));
  // FLUX.2 reads FLUX.1's shape keys (FamilyDescription::alsoReads).
  EXPECT_EQ(findKey("model.num_layers")->families, (std::vector<std::string>{"flux", "flux2"}));
  EXPECT_TRUE(findKey("train.lr")->families.empty());
  // The saver's order is the one the shared table and the anchors give.
  EXPECT_EQ(indexOf("model.vae_path"), indexOf("model.name_or_path") + 1);
  EXPECT_EQ(indexOf("model.arch"), indexOf("model.is_flux") + 1);
}

// The GPU map draws what the family calls its parts: the stem, the head and each block kind.
TEST(FamilyRegistry, EveryFamilyNamesItsPartsForTheGpuMap) {
  for (const FamilyDescription* f : families()) {
    std::vector<std::string> kinds;
    for (const MapPart& p : f->mapParts) {
      EXPECT_FALSE(p.row.empty() || p.tip.empty() || p.legend.empty()) << f->id << ": " << p.kind;
      EXPECT_EQ(std::count(kinds.begin(), kinds.end(), p.kind), 0) << f->id << ": " << p.kind << " twice";
      kinds.push_back(p.kind);
    }
    ASSERT_GE(kinds.size(), 3u) << f->id;
    EXPECT_EQ(kinds.front(), "stem") << f->id;
    EXPECT_EQ(kinds.back(), "head") << f->id;
  }
  auto legend = [](const std::string& id) {
    std::vector<std::string> out;
    for (const MapPart& p : family(id).mapParts) out.push_back(p.legend);
    return out;
  };
  // The words the map said before the families brought them (tests/gui checks them on the map).
  EXPECT_EQ(legend("flux"), (std::vector<std::string>{"stem", "double block", "single block", "head"}));
  EXPECT_EQ(legend("flux2"), (std::vector<std::string>{"stem", "double block", "single block", "head"}));
  EXPECT_EQ(legend("llama"), (std::vector<std::string>{"stem: embedding", "decoder layer", "head: norm + lm_head"}));
}

TEST(FamilyRegistry, AFamilyThatIsNotRegisteredIsReportedByName) {
  RunConfig cfg;
  cfg.datasets.emplace_back();
  cfg.datasets[0].type = DatasetType::Synthetic;
  cfg.model.arch = "sd3";
  const auto problems = validate(cfg, noPaths());
  bool said = false;
  for (const Problem& p : problems)
    if (p.key == "model.arch" && p.severity == Severity::Error) {
      said = true;
      EXPECT_NE(p.message.find("'sd3'"), std::string::npos) << p.format();
      EXPECT_NE(p.hint.find("flux, llama, flux2"), std::string::npos) << p.format();
    }
  EXPECT_TRUE(said) << test::dump(problems);
  EXPECT_EQ(findFamily("sd3"), nullptr);
  try {
    family("sd3");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'sd3'"), std::string::npos) << e.what();
  }
  // Read from a file, the id is one of the registered ones, as an enum's spelling was.
  const LoadedConfig loaded = parseRunConfig("model:\n  arch: sd3\n", "a.yaml");
  bool refused = false;
  for (const Problem& p : loaded.problems)
    if (p.key == "model.arch" && p.message.find("expected one of: flux llama flux2") != std::string::npos)
      refused = true;
  EXPECT_TRUE(refused) << test::dump(loaded.problems);
}

TEST(FamilyRegistry, TheKeysAFamilyDoesNotReadAreOneListForTheValidatorAndTheApp) {
  RunConfig cfg;
  cfg.model.arch = "llama";
  cfg.model.isFlux = false;  // quietElsewhere: what a llama config means, not an ignored key
  cfg.model.vaePath = "/x/ae.safetensors";
  cfg.datasets.resize(2);
  cfg.datasets[1].folderPath = "/data/images";
  cfg.sample.width = 512;
  const std::vector<UnreadKey> unread = keysNotRead(cfg, "llama");
  std::vector<std::string> keys;
  for (const UnreadKey& u : unread) keys.push_back(u.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"model.vae_path", "datasets[1].folder_path", "sample.width"}));
  EXPECT_EQ(formatValue(unread[1].value), "/data/images");
  EXPECT_EQ(unread[1].datasetIndex, 1u);
  // The validator says each of them is ignored, and no other key.
  std::vector<std::string> ignored;
  for (const Problem& p : validate(cfg, noPaths()))
    if (p.severity == Severity::Warning && p.message.rfind("ignored: a llama model does not read it", 0) == 0)
      ignored.push_back(p.key);
  EXPECT_EQ(ignored, keys);
  // FLUX.1 reads all three (and the llama keys are at their defaults); a default config has none for any family.
  EXPECT_TRUE(keysNotRead(cfg, "flux").empty());
  for (const std::string& id : familyIds()) EXPECT_TRUE(keysNotRead(RunConfig{}, id).empty()) << id;
}

// A family of the test's own, registered for one test.
class TestFamily {
 public:
  explicit TestFamily(FamilyDescription d) : id_(d.id) { registerFamily(std::move(d)); }
  ~TestFamily() { unregisterFamily(id_); }

 private:
  std::string id_;
};

TEST(FamilyRegistry, ANewFamilyKeyIsOneRow) {
  FamilyDescription d;
  d.id = "testfam";
  d.displayName = "Test";
  d.datasetTypes = {DatasetType::Synthetic};
  d.exportFormats = {ExportFormat::Diffusers};
  // The one row: no struct member, no other table.
  d.keys = {{rows::valueRow<int64_t>("model.test_knob", 7, "A knob only this family has",
                                     rows::Opt().min(1).max(10).look("Test knob", "Model")),
             "model.arch"}};
  d.rules.model = [](RuleContext& ctx) {
    if (familyValue<int64_t>(ctx.config(), "model.test_knob") == 5)
      ctx.error("model.test_knob", "5 is refused by the family's own rule");
  };
  const TestFamily registered(std::move(d));

  EXPECT_EQ(indexOf("model.test_knob"), indexOf("model.arch") + 1);
  EXPECT_EQ(findKey("model.test_knob")->families, (std::vector<std::string>{"testfam"}));
  EXPECT_EQ(findKey("model.arch")->choices.back(), "testfam");

  const LoadedConfig loaded =
      parseRunConfig("model:\n  arch: testfam\n  test_knob: 9\ndatasets:\n  - type: synthetic\n", "t.yaml");
  EXPECT_TRUE(loaded.problems.empty()) << test::dump(loaded.problems);
  EXPECT_EQ(loaded.config.model.arch, "testfam");
  EXPECT_EQ(familyValue<int64_t>(loaded.config, "model.test_knob"), 9);
  // Saved in the schema's place and read back the same.
  const std::string yaml = toYaml(loaded.config);
  EXPECT_NE(yaml.find("arch: testfam\n  test_knob: 9\n"), std::string::npos) << yaml;
  EXPECT_EQ(parseRunConfig(yaml, "again.yaml").config, loaded.config);
  // At its default it is not stored (a config equals one that never named it).
  RunConfig atDefault = loaded.config;
  setValue(atDefault, "model.test_knob", Value{int64_t{7}});
  EXPECT_TRUE(atDefault.familyValues.empty());

  // The schema's range, the family's rule, and the other families' "ignored".
  RunConfig cfg = loaded.config;
  setValue(cfg, "model.test_knob", Value{int64_t{11}});
  EXPECT_TRUE(test::hasKey(validate(cfg, noPaths()), "model.test_knob"));
  setValue(cfg, "model.test_knob", Value{int64_t{5}});
  bool ruled = false;
  for (const Problem& p : validate(cfg, noPaths()))
    ruled |= p.key == "model.test_knob" && p.message == "5 is refused by the family's own rule";
  EXPECT_TRUE(ruled);
  cfg.model.arch = "flux";
  ASSERT_EQ(keysNotRead(cfg, "flux").size(), 1u);
  EXPECT_EQ(keysNotRead(cfg, "flux").front().key, "model.test_knob");
}

TEST(FamilyRegistry, AnUnregisteredFamilysRowsLeaveTheSchema) {
  const size_t before = schema().size();
  {
    FamilyDescription d;
    d.id = "testfam2";
    d.keys = {{rows::valueRow<bool>("train.test_switch", false, "A switch", rows::Opt().look("Switch", "Training")),
               "no.such_key"}};
    const TestFamily registered(std::move(d));
    // An anchor that is not there: the end of its section.
    EXPECT_EQ(indexOf("train.test_switch"), indexOf("train.ema_config.update_every") + 1);
    EXPECT_EQ(schema().size(), before + 1);
  }
  EXPECT_EQ(schema().size(), before);
  EXPECT_EQ(findKey("train.test_switch"), nullptr);
}

}  // namespace
}  // namespace strata::config
