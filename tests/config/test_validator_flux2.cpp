// model.arch: flux2 in the validator: what a FLUX.2 run can train (images or
// synthetic data, samples from an images run, diffusers / kohya / comfy files) and
// the refusals that say why.
#include <gtest/gtest.h>

#include <algorithm>

#include "ConfigTestSupport.h"
#include "common/TestSupport.h"
#include "config/ConfigSchema.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"

namespace strata::config {
namespace {

using test::hasProblem;

std::vector<Problem> check(const std::string& yaml) {
  return validateLoaded(parseRunConfig(yaml, "flux2.yaml"), std::nullopt, true);
}

// A valid FLUX.2 run: the tiny preset, random weights, a synthetic dataset.
const std::string kHead =
    "model:\n"                  // 1
    "  arch: flux2\n"           // 2
    "  preset: tiny\n"          // 3
    "  random_weights: true\n"  // 4
    "  device: cpu\n";          // 5

TEST(ValidatorFlux2, SyntheticTinyIsClean) {
  const auto problems = check(kHead +
                              "datasets: [{type: synthetic, resolution: [64]}]\n"
                              "sample: {sample_every: 0}\n"
                              "save: {export_formats: [diffusers, kohya, comfy]}\n");
  EXPECT_EQ(countErrors(problems), 0u) << test::dump(problems);
  EXPECT_TRUE(problems.empty()) << test::dump(problems);
}

TEST(ValidatorFlux2, AnImagesDatasetIsTakenAndARandomRunsTokenizerIsNamed) {
  const auto problems = check(kHead +
                              "datasets:\n"
                              "  - type: images\n"  // 7
                              "    folder_path: /nonexistent\n"
                              "sample: {sample_every: 0}\n");
  EXPECT_FALSE(std::any_of(problems.begin(), problems.end(), [](const auto& p) { return p.key == "datasets[0].type"; }))
      << test::dump(problems);
  // random_weights still reads the tokenizer: refused before anything loads, with the keys that give it.
  bool says = false;
  for (const auto& p : problems)
    says |= p.severity == Severity::Error && p.key == "model.tokenizer_path" &&
            p.message.find("needs FLUX.2's tokenizer") != std::string::npos &&
            p.hint.find("model.text_encoder_path") != std::string::npos;
  EXPECT_TRUE(says) << test::dump(problems);
}

TEST(ValidatorFlux2, LatentsShapesAndJsonlAreRefusedWithTheirReasons) {
  const std::pair<const char*, const char*> cases[] = {
      {"latents", "FLUX.1's tensors"}, {"shapes", "pixel code"}, {"jsonl", "images or synthetic data"}};
  for (const auto& [type, why] : cases) {
    const auto problems =
        check(kHead + "datasets: [{type: " + type + ", resolution: [64]}]\nsample: {sample_every: 0}\n");
    EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].type", 6, why)) << type << "\n"
                                                                                   << test::dump(problems);
  }
}

TEST(ValidatorFlux2, SamplingOnSyntheticDataIsRefusedWithTheReason) {
  const auto problems = check(kHead +
                              "datasets: [{type: synthetic, resolution: [64]}]\n"
                              "sample:\n"
                              "  sample_every: 10\n"  // 8
                              "  prompts: [a cat]\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "sample.sample_every", 8, "samples only with an images dataset"))
      << test::dump(problems);
}

TEST(ValidatorFlux2, PeftAndFlux1OnlyKeysAreRefusedOrSaidQuantizeIsAccepted) {
  const auto problems = check(
      "model:\n"
      "  arch: flux2\n"
      "  preset: flux-dev\n"  // 3
      "  random_weights: true\n"
      "  device: cpu\n"
      "  quantize: true\n"                   // 6
      "  pooled_projection_dim: 768\n"       // 7
      "  t5_path: /models/t5.safetensors\n"  // 8
      "datasets: [{type: synthetic, resolution: [64]}]\n"
      "sample: {sample_every: 0}\n"
      "save: {export_formats: [peft]}\n");  // 11
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.preset", 3, "is a FLUX.1 shape")) << test::dump(problems);
  // FLUX.2 is streamed and quantized on load as FLUX.1 is (dit/DitCheckpoint.h): model.quantize is accepted.
  EXPECT_FALSE(std::any_of(problems.begin(), problems.end(), [](const auto& p) { return p.key == "model.quantize"; }))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.pooled_projection_dim", 7, "no pooled"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "model.t5_path", 8, "does not read it")) << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "save.export_formats", 11, "causal-LM form"))
      << test::dump(problems);
}

TEST(ValidatorFlux2, Flux2DevPresetNeedsArchFlux2) {
  const auto problems = check(
      "model:\n"
      "  preset: flux2-dev\n"  // 2
      "  random_weights: true\n"
      "  device: cpu\n"
      "datasets: [{type: synthetic, resolution: [64]}]\n"
      "sample: {sample_every: 0}\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.preset", 2, "set model.arch: flux2") ||
              hasProblem(problems, Severity::Error, "model.preset", 2, "FLUX.2 shape"))
      << test::dump(problems);
}

// model.preset names one of the family's shapes (FamilyDescription::presets): the
// [klein] presets are FLUX.2's; a name of no family is refused with the family's list.
TEST(ValidatorFlux2, KleinPresetsAreFlux2sAndUnknownNamesAreRefused) {
  for (const char* preset : {"flux2-klein-9b", "flux2-klein-4b", "flux2-dev", "tiny"}) {
    const auto problems = check(std::string("model:\n  arch: flux2\n  preset: ") + preset +
                                "\n  random_weights: true\n  device: cpu\n"
                                "datasets: [{type: synthetic, resolution: [64]}]\nsample: {sample_every: 0}\n");
    EXPECT_FALSE(std::any_of(problems.begin(), problems.end(), [](const auto& p) { return p.key == "model.preset"; }))
        << preset << "\n"
        << test::dump(problems);
  }
  auto problems = check(
      "model:\n  arch: flux\n  preset: flux2-klein-9b\n  random_weights: true\n  device: cpu\n"  // 3
      "datasets: [{type: synthetic, resolution: [64]}]\nsample: {sample_every: 0}\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.preset", 3, "is a FLUX.2 shape, and model.arch is flux"))
      << test::dump(problems);
  // A name no family has is refused where the file is read, with every preset listed.
  problems = check(
      "model:\n  arch: flux2\n  preset: flux3-huge\n  random_weights: true\n  device: cpu\n"  // 3
      "datasets: [{type: synthetic, resolution: [64]}]\nsample: {sample_every: 0}\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.preset", 3, "flux2-klein-4b")) << test::dump(problems);
}

// The hints of the shared rules are FLUX.2's own (they were a causal LM's: a jsonl dataset, peft, config.json).
TEST(ValidatorFlux2, TheSharedRulesHintsSpeakOfFlux2) {
  const auto problems = check(
      "model:\n"
      "  arch: flux2\n"
      "  preset: tiny\n"
      "  name_or_path: /nonexistent/flux2\n"  // 4
      "  device: cpu\n"
      "train: {lr: 0.05}\n"  // 6
      "sample: {sample_every: 0}\n"
      "save: {export_formats: []}\n");  // 8
  auto hintOf = [&problems](const std::string& key) {
    for (const auto& p : problems)
      if (p.key == key) return p.hint;
    return std::string("(no problem at " + key + ")");
  };
  EXPECT_EQ(hintOf("model.name_or_path"), "give a FLUX.2 model: a diffusers folder or a BFL .safetensors file")
      << test::dump(problems);
  EXPECT_EQ(hintOf("train.lr"), "1e-4 is the usual FLUX LoRA rate") << test::dump(problems);
  EXPECT_NE(hintOf("datasets").find("type: images"), std::string::npos) << test::dump(problems);
  EXPECT_EQ(hintOf("save.export_formats"), "add diffusers, kohya or comfy") << test::dump(problems);
  for (const auto& p : problems)
    for (const char* word : {"causal", "jsonl", "peft", "config.json"})
      EXPECT_EQ(p.hint.find(word), std::string::npos) << word << " in " << test::dump(problems);
}

TEST(ValidatorFlux2, TheSchemaSaysWhichKeysFlux2Reads) {
  for (const auto& k : schema()) {
    if (k.path == "model.num_layers" || k.path == "model.preset" || k.path == "train.guidance" ||
        k.path == "datasets[].resolution" || k.path == "datasets[].folder_path" || k.path == "model.vae_path" ||
        k.path == "model.text_encoder_path" || k.path == "model.distilled" || k.path == "sample.guidance_scale")
      EXPECT_TRUE(k.appliesTo(std::string("flux2"))) << k.path;
    if (k.path == "model.t5_path" || k.path == "model.pooled_projection_dim" || k.path == "datasets[].file_path")
      EXPECT_FALSE(k.appliesTo(std::string("flux2"))) << k.path;
    if (k.path == "model.text_encoder_path" || k.path == "model.distilled")
      EXPECT_FALSE(k.appliesTo(std::string("flux"))) << k.path;
  }
}

TEST(ValidatorFlux2, TheShippedConfigHasNoProblems) {
  const auto loaded = loadRunConfig(strata::test::sourceDir() / "configs" / "flux2-dev-4x24gb.yaml");
  EXPECT_EQ(loaded.config.model.arch, std::string("flux2"));
  const auto problems = validateLoaded(loaded, std::nullopt);
  EXPECT_TRUE(problems.empty()) << test::dump(problems);
}

}  // namespace
}  // namespace strata::config
