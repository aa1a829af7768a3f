// model.arch: which keys each model family reads (for the app's form), and the
// validator's family rules (a causal LM's datasets, exports and ignored keys).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ConfigTestSupport.h"
#include "common/TestSupport.h"
#include "config/ConfigSchema.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"

namespace strata::config {
namespace {

using test::hasProblem;

std::vector<Problem> check(const std::string& yaml) {
  return validateLoaded(parseRunConfig(yaml, "bad.yaml"), std::nullopt, true);
}

class FamilyKeys : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(tmp_ / "m");
    std::ofstream(tmp_ / "m" / "config.json") << "{}";
    std::ofstream(tmp_ / "d.jsonl") << "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  }
  strata::test::TempDir tmp_;
};

std::string llamaBase(const std::filesystem::path& dir) {
  return "model:\n"                                           // 1
         "  arch: llama\n"                                    // 2
         "  name_or_path: " + (dir / "m").string() + "\n"     // 3
         "  random_weights: true\n"                           // 4
         "  device: cpu\n"                                    // 5
         "datasets:\n"                                        // 6
         "  - type: jsonl\n"                                  // 7
         "    file_path: " + (dir / "d.jsonl").string() + "\n"  // 8
         "sample:\n"                                          // 9
         "  sample_every: 0\n"                                // 10
         "save:\n"                                            // 11
         "  export_formats: [peft]\n";                        // 12
}

TEST(FamilySchema, EveryKeyNamesTheFamiliesThatReadIt) {
  int fluxOnly = 0, llamaOnly = 0;
  for (const auto& k : schema()) {
    EXPECT_TRUE(k.appliesTo(ModelArch::Flux) || k.appliesTo(ModelArch::Llama)) << k.path;
    fluxOnly += k.appliesTo(ModelArch::Flux) && !k.appliesTo(ModelArch::Llama);
    llamaOnly += k.appliesTo(ModelArch::Llama) && !k.appliesTo(ModelArch::Flux);
  }
  EXPECT_GT(fluxOnly, 0);
  EXPECT_GT(llamaOnly, 0);
  EXPECT_FALSE(findKey("sample.width")->appliesTo(ModelArch::Llama));
  EXPECT_FALSE(findKey("datasets[].max_seq_len")->appliesTo(ModelArch::Flux));
  EXPECT_TRUE(findKey("train.lr")->appliesTo(ModelArch::Llama));
  // The single-file VAE and CLIP shape keys are FLUX.1's (a causal LM reads config.json);
  // the tokenizer folder is read by both.
  EXPECT_FALSE(findKey("model.vae_norm_num_groups")->appliesTo(ModelArch::Llama));
  EXPECT_FALSE(findKey("model.clip_num_attention_heads")->appliesTo(ModelArch::Llama));
  EXPECT_TRUE(findKey("model.tokenizer_path")->appliesTo(ModelArch::Llama));
  EXPECT_TRUE(findKey("model.arch")->appliesTo(ModelArch::Flux));
  EXPECT_EQ(findKey("model.arch")->defaultValue, Value{std::string("flux")});
}

TEST_F(FamilyKeys, ALlamaBaseIsClean) {
  const auto problems = check(llamaBase(tmp_.path()));
  EXPECT_TRUE(problems.empty()) << test::dump(problems);
}

TEST_F(FamilyKeys, AFluxDatasetTypeIsRefusedForLlama) {
  auto yaml = llamaBase(tmp_.path());
  yaml.replace(yaml.find("type: jsonl"), 11, "type: shapes");
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "datasets[0].type", 7, "jsonl or synthetic"));
}

TEST_F(FamilyKeys, AJsonlDatasetIsRefusedForFlux) {
  const std::string yaml =
      "model:\n"
      "  preset: tiny\n"
      "  random_weights: true\n"
      "  device: cpu\n"
      "datasets:\n"
      "  - type: jsonl\n"  // 6
      "    file_path: " + (tmp_ / "d.jsonl").string() + "\n"
      "sample:\n"
      "  sample_every: 0\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "datasets[0].type", 6, "model.arch: llama"));
}

TEST_F(FamilyKeys, AMissingJsonlFileIsNamed) {
  auto yaml = llamaBase(tmp_.path());
  const auto at = yaml.find((tmp_ / "d.jsonl").string());
  yaml.replace(at, (tmp_ / "d.jsonl").string().size(), (tmp_ / "nope.jsonl").string());
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "datasets[0].file_path", 8, "not found"));
}

TEST_F(FamilyKeys, AModelFolderWithoutConfigJsonIsRefused) {
  std::filesystem::remove(tmp_ / "m" / "config.json");
  EXPECT_TRUE(hasProblem(check(llamaBase(tmp_.path())), Severity::Error, "model.name_or_path", 3, "config.json"));
}

TEST_F(FamilyKeys, FluxFileFormsAreRefusedForLlama) {
  auto yaml = llamaBase(tmp_.path());
  yaml.replace(yaml.find("[peft]"), 6, "[kohya]");
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "save.export_formats", 12, "peft"));
}

TEST_F(FamilyKeys, AFluxOnlyKeySetForLlamaIsWarnedAsIgnored) {
  auto yaml = llamaBase(tmp_.path());
  yaml.replace(yaml.find("  sample_every: 0\n"), 18, "  sample_every: 0\n  width: 512\n");  // width: line 11
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Warning, "sample.width", 11, "ignored"));
}

TEST_F(FamilyKeys, IsFluxFalseWithArchFluxSaysToSetTheArch) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  is_flux: false\n"  // 3
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.is_flux", 3, "model.arch: llama"));
}

TEST_F(FamilyKeys, ATextFieldNeedsItsMarker) {
  auto yaml = llamaBase(tmp_.path());
  yaml.replace(yaml.find("sample:\n"), 8, "    text_field: text\n    response_marker: \"\"\nsample:\n");  // 9, 10
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "datasets[0].response_marker", 10, "marker"));
}

}  // namespace
}  // namespace strata::config
