// model.arch: which keys each model family reads (for the app's form), and the
// validator's family rules (a causal LM's datasets, exports and ignored keys).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ConfigTestSupport.h"
#include "common/TestSupport.h"
#include "config/ConfigSchema.h"
#include "config/FamilyRegistry.h"
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
  return "model:\n"         // 1
         "  arch: llama\n"  // 2
         "  name_or_path: " +
         (dir / "m").string() +
         "\n"                        // 3
         "  random_weights: true\n"  // 4
         "  device: cpu\n"           // 5
         "datasets:\n"               // 6
         "  - type: jsonl\n"         // 7
         "    file_path: " +
         (dir / "d.jsonl").string() +
         "\n"                           // 8
         "sample:\n"                    // 9
         "  sample_every: 0\n"          // 10
         "save:\n"                      // 11
         "  export_formats: [peft]\n";  // 12
}

TEST(FamilySchema, EveryKeyNamesTheFamiliesThatReadIt) {
  int fluxOnly = 0, llamaOnly = 0;
  for (const auto& k : schema()) {
    EXPECT_TRUE(k.appliesTo(std::string("flux")) || k.appliesTo(std::string("llama")) ||
                k.appliesTo(std::string("flux2")))
        << k.path;
    fluxOnly += k.appliesTo(std::string("flux")) && !k.appliesTo(std::string("llama"));
    llamaOnly += k.appliesTo(std::string("llama")) && !k.appliesTo(std::string("flux"));
  }
  EXPECT_GT(fluxOnly, 0);
  EXPECT_GT(llamaOnly, 0);
  EXPECT_FALSE(findKey("sample.width")->appliesTo(std::string("llama")));
  EXPECT_FALSE(findKey("datasets[].max_seq_len")->appliesTo(std::string("flux")));
  EXPECT_TRUE(findKey("train.lr")->appliesTo(std::string("llama")));
  // The single-file VAE and CLIP shape keys are FLUX.1's (a causal LM reads config.json);
  // the tokenizer folder is read by both.
  EXPECT_FALSE(findKey("model.vae_norm_num_groups")->appliesTo(std::string("llama")));
  EXPECT_FALSE(findKey("model.clip_num_attention_heads")->appliesTo(std::string("llama")));
  EXPECT_TRUE(findKey("model.tokenizer_path")->appliesTo(std::string("llama")));
  EXPECT_TRUE(findKey("model.arch")->appliesTo(std::string("flux")));
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
      "    file_path: " +
      (tmp_ / "d.jsonl").string() +
      "\n"
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

// Words that name FLUX.1's files, defaults or forms: none of them belongs in what a
// Llama config is told.
bool namesFlux(const std::string& text) {
  for (const char* w : {"FLUX", "flux", "diffusers", "safetensors file", "kohya", "comfy", "T5", "CLIP", "VAE",
                        "tokenizer_2", "images"})
    if (text.find(w) != std::string::npos) return true;
  return false;
}

// `strip`: the test's own folder, whose random name could spell one.
::testing::AssertionResult noFluxWords(const std::vector<Problem>& problems, const std::string& strip) {
  for (const auto& p : problems) {
    std::string text = p.message + " " + p.hint;
    for (size_t at; !strip.empty() && (at = text.find(strip)) != std::string::npos;) text.erase(at, strip.size());
    if (namesFlux(text)) return ::testing::AssertionFailure() << "a FLUX word told to a llama config: " << p.format();
  }
  return ::testing::AssertionSuccess();
}

TEST_F(FamilyKeys, ALlamaConfigIsToldAboutItsOwnFiles) {
  // No model folder: the hint names a causal LM's folder, not FLUX.1-dev's.
  auto noModel = llamaBase(tmp_.path());
  noModel.replace(noModel.find("  name_or_path: "), noModel.find("  random_weights") - noModel.find("  name_or_path: "),
                  "  name_or_path: \"\"\n");
  auto noModelReal = noModel;
  noModelReal.replace(noModelReal.find("random_weights: true"), 20, "random_weights: false");
  const auto real = check(noModelReal);
  EXPECT_TRUE(hasProblem(real, Severity::Error, "model.name_or_path", 3, "config.json")) << test::dump(real);
  EXPECT_TRUE(noFluxWords(real, tmp_.path().string()));
  // With random weights it still reads config.json there: said by the validator, not at the start.
  const auto random = check(noModel);
  EXPECT_TRUE(hasProblem(random, Severity::Error, "model.name_or_path", 3, "config.json")) << test::dump(random);
  EXPECT_TRUE(noFluxWords(random, tmp_.path().string()));

  // A folder that is not there: said once, with what the folder holds.
  auto missing = llamaBase(tmp_.path());
  missing.replace(missing.find("random_weights: true"), 20, "random_weights: false");
  missing.replace(missing.find((tmp_ / "m").string()), (tmp_ / "m").string().size(), (tmp_ / "gone").string());
  const auto gone = check(missing);
  EXPECT_TRUE(hasProblem(gone, Severity::Error, "model.name_or_path", 3, "not found"));
  int nameErrors = 0;
  for (const auto& p : gone) nameErrors += p.key == "model.name_or_path" && p.isError();
  EXPECT_EQ(nameErrors, 1) << test::dump(gone);
  EXPECT_TRUE(noFluxWords(gone, tmp_.path().string()));

  // A high learning rate, no export form, no dataset: the hints are a causal LM's.
  auto rest = llamaBase(tmp_.path());
  rest.replace(rest.find("  export_formats: [peft]\n"), 25, "  export_formats: []\ntrain:\n  lr: 0.05\n");
  const auto restProblems = check(rest);
  EXPECT_TRUE(hasProblem(restProblems, Severity::Warning, "save.export_formats", 12, "peft"));
  EXPECT_TRUE(hasProblem(restProblems, Severity::Warning, "train.lr", 14, "causal LM"));
  EXPECT_TRUE(noFluxWords(restProblems, tmp_.path().string()));
  auto noData = llamaBase(tmp_.path());
  noData.replace(noData.find("datasets:\n"), noData.find("sample:\n") - noData.find("datasets:\n"), "datasets: []\n");
  const auto noDataProblems = check(noData);
  EXPECT_TRUE(hasProblem(noDataProblems, Severity::Error, "datasets", 6, "jsonl"));
  EXPECT_TRUE(noFluxWords(noDataProblems, tmp_.path().string()));
}

TEST_F(FamilyKeys, FluxShapeKeysSetForLlamaAreIgnoredNotCheckedAsFlux) {
  // FLUX.1's rotary, single-file and sample-size rules do not apply: each key is only said to be ignored.
  auto yaml = llamaBase(tmp_.path());
  yaml.replace(yaml.find("  device: cpu\n"), 14,
               "  device: cpu\n  axes_dims_rope: [3, 5]\n  attention_head_dim: 16\n  vae_norm_num_groups: 8\n"
               "  clip_num_attention_heads: 4\n");                                         // 6..9
  yaml.replace(yaml.find("  sample_every: 0\n"), 18, "  sample_every: 0\n  width: 10\n");  // width: line 15
  const auto problems = check(yaml);
  for (const auto& p : problems) EXPECT_FALSE(p.isError()) << p.format();
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "model.axes_dims_rope", 6, "ignored"));
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "model.vae_norm_num_groups", 8, "ignored"));
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "sample.width", 15, "ignored"));
  EXPECT_TRUE(noFluxWords(problems, tmp_.path().string()));
}

TEST(FamilySchema, ASharedKeysDocNamesTheFamilyItIsFor) {
  // What a form shows a Llama config for every key it reads.
  for (const auto& k : schema()) {
    // These two name both families on purpose.
    if (!k.appliesTo(std::string("llama")) || k.path == "model.attention_backend" || k.path == "model.arch") continue;
    EXPECT_FALSE(namesFlux(k.docFor(std::string("llama")))) << k.path << ": " << k.docFor(std::string("llama"));
  }
  EXPECT_NE(findKey("model.name_or_path")->docFor(std::string("llama")).find("config.json"), std::string::npos);
  EXPECT_NE(findKey("model.name_or_path")->docFor(std::string("flux")).find("FLUX"), std::string::npos);
  EXPECT_NE(findKey("datasets[].type")->docFor(std::string("llama")).find("jsonl"), std::string::npos);
  EXPECT_EQ(findKey("train.lr")->docFor(std::string("llama")), findKey("train.lr")->doc);
}

// A family's own words for a key reach the key: a shared key's, and one of another
// family's keys that it reads too (FLUX.2's words for FLUX.1's VAE file and widths).
TEST(FamilySchema, EveryFamilysKeyDocsReachTheKeysItReads) {
  for (const FamilyDescription* f : families())
    for (const auto& [path, doc] : f->keyDocs) {
      const KeySpec* k = findKey(path);
      ASSERT_NE(k, nullptr) << f->id << ": words for " << path << ", which is no key";
      EXPECT_TRUE(k->appliesTo(f->id)) << f->id << ": words for " << path << ", which it does not read";
      EXPECT_EQ(k->docFor(f->id), doc) << f->id << ": " << path;
    }
  // What FLUX.2's form shows for the keys it shares with FLUX.1 speaks of FLUX.2's parts,
  // not FLUX.1's T5, CLIP or ae.safetensors; FLUX.1's words stay FLUX.1's.
  const std::string flux2 = "flux2", flux = "flux";
  for (const auto& k : schema()) {
    if (!k.appliesTo(flux2) || !k.appliesTo(flux)) continue;
    for (const char* word : {"T5", "CLIP", " ae.safetensors"})
      EXPECT_EQ(k.docFor(flux2).find(word), std::string::npos) << k.path << ": " << k.docFor(flux2);
  }
  EXPECT_NE(findKey("model.vae_path")->docFor(flux2).find("flux2-vae.safetensors"), std::string::npos);
  EXPECT_NE(findKey("model.vae_path")->docFor(flux).find("ae.safetensors"), std::string::npos);
  EXPECT_NE(findKey("model.joint_attention_dim")->docFor(flux).find("T5"), std::string::npos);
}

}  // namespace
}  // namespace strata::config
