// One test per validation rule: a small bad YAML, the problem's key and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ConfigTestSupport.h"
#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "config/RunConfigYaml.h"
#include "config/Validator.h"
#include "device/DeviceInventory.h"

namespace strata::config {
namespace {

using test::hasKey;
using test::hasProblem;

// A valid base: random tiny model on CPU with a shapes dataset (no paths needed).
// Tests append or replace lines; keep the line numbers in mind (1-based).
const char* kBase =
    "model:\n"                  // 1
    "  preset: tiny\n"          // 2
    "  random_weights: true\n"  // 3
    "  device: cpu\n"           // 4
    "datasets:\n"               // 5
    "  - type: shapes\n"        // 6
    "    resolution: [32]\n"    // 7
    "sample:\n"                 // 8
    "  sample_every: 0\n";      // 9

std::vector<Problem> check(const std::string& yaml,
                           std::optional<std::vector<device::DeviceInfo>> devices = std::nullopt,
                           bool checkPaths = true) {
  return validateLoaded(parseRunConfig(yaml, "bad.yaml"), std::move(devices), checkPaths);
}

device::DeviceInfo gpu(int index, int ccMajor, int64_t gb = 16, const std::string& name = "test gpu") {
  device::DeviceInfo d;
  d.index = index;
  d.name = name;
  d.ccMajor = ccMajor;
  d.totalBytes = gb * 1000000000LL;
  return d;
}

TEST(Validator, BaseIsClean) {
  const auto problems = check(kBase);
  EXPECT_TRUE(problems.empty()) << test::dump(problems);
}

// `training_folder: ~/runs` made a folder named "~" in the working folder: a
// path key that starts with '~' is refused with the full path to write instead.
TEST(Validator, APathStartingWithTildeIsRefusedWithTheFullPath) {
  const char* home = std::getenv("HOME");
  ASSERT_TRUE(home && *home);
  const auto problems = check(std::string(kBase) + "job:\n  training_folder: ~/runs\n");  // 10-11
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "job.training_folder", 11, "starts with '~'"))
      << test::dump(problems);
  const auto it =
      std::find_if(problems.begin(), problems.end(), [](const Problem& p) { return p.key == "job.training_folder"; });
  ASSERT_NE(it, problems.end());
  EXPECT_EQ(it->hint, "write the full path: " + std::string(home) + "/runs");
  // Another user's home ("~bob/runs") cannot be named for them.
  const auto other = check(std::string(kBase) + "job:\n  training_folder: ~bob/runs\n");
  EXPECT_TRUE(hasProblem(other, Severity::Error, "job.training_folder", 11, "starts with '~'")) << test::dump(other);
  // A '~' inside a path is an ordinary character.
  EXPECT_FALSE(hasKey(check(std::string(kBase) + "job:\n  training_folder: runs~old\n"), "job.training_folder"));
}

TEST(Validator, LowVramWithSplitIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  split_model_over_gpus: true\n"  // 3
      "  gpu_ids: \"0,1\"\n"
      "  low_vram: true\n"  // 5
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  const auto problems = check(yaml);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.low_vram", 5, "split_model_over_gpus (line 3)"));
  EXPECT_EQ(countErrors(problems), 1u) << test::dump(problems);
}

TEST(Validator, LowVramIsRefusedWithTheReason) {
  const auto problems = check(
      "model:\n"
      "  preset: tiny\n"
      "  random_weights: true\n"
      "  device: cpu\n"
      "  low_vram: true\n"  // 5
      "datasets: [{type: shapes, resolution: [32]}]\n"
      "sample: {sample_every: 0}\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.low_vram", 5, "no low-VRAM mode")) << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 1u) << test::dump(problems);
}

TEST(Validator, OffloadingCheckpointsWithoutCheckpointingIsSaidToDoNothing) {
  const std::string head =
      "model:\n"
      "  preset: tiny\n"
      "  random_weights: true\n"
      "  device: cpu\n"
      "train:\n"
      "  offload_checkpoints: true\n";  // 6
  const std::string tail = "datasets: [{type: shapes, resolution: [32]}]\nsample: {sample_every: 0}\n";
  const auto off = check(head + "  gradient_checkpointing: false\n" + tail);
  EXPECT_TRUE(hasProblem(off, Severity::Warning, "train.offload_checkpoints", 6, "no effect")) << test::dump(off);
  EXPECT_EQ(countErrors(off), 0u) << test::dump(off);
  const auto on = check(head + "  gradient_checkpointing: true\n" + tail);
  for (const auto& p : on) EXPECT_NE(p.key, "train.offload_checkpoints") << test::dump(on);
}

TEST(Validator, OffloadingOptimizerStateWantsAdamwAndACard) {
  const auto yaml = [](const std::string& device, const std::string& optimizer) {
    return "model:\n"
           "  preset: tiny\n"
           "  random_weights: true\n"
           "  device: " +
           device +
           "\n"                                 // 4
           "train:\n"                           // 5
           "  offload_optimizer_state: true\n"  // 6
           "  optimizer: " +
           optimizer +
           "\n"  // 7
           "datasets: [{type: shapes, resolution: [32]}]\n"
           "sample: {sample_every: 0}\n";
  };
  const std::string key = "train.offload_optimizer_state";
  // adamw on a card: nothing to say.
  for (const auto& p : check(yaml("cuda", "adamw"), std::vector{gpu(0, 9)})) EXPECT_NE(p.key, key) << p.format();
  // No card in the run: the state is in host memory already.
  const auto cpu = check(yaml("cpu", "adamw"));
  EXPECT_TRUE(hasProblem(cpu, Severity::Warning, key, 6, "no CUDA device")) << test::dump(cpu);
  EXPECT_EQ(countErrors(cpu), 0u) << test::dump(cpu);
  const auto autoWithoutGpus = check(yaml("auto", "adamw"), std::vector<device::DeviceInfo>{});
  EXPECT_TRUE(hasProblem(autoWithoutGpus, Severity::Warning, key, 6, "no CUDA device")) << test::dump(autoWithoutGpus);
  for (const auto& p : check(yaml("auto", "adamw"), std::vector{gpu(0, 9)})) EXPECT_NE(p.key, key) << p.format();
  // adamw8bit: refused, naming the optimizer's line.
  const auto eight = check(yaml("cuda", "adamw8bit"), std::vector{gpu(0, 9)});
  EXPECT_TRUE(hasProblem(eight, Severity::Error, key, 6, "adamw8bit (line 7)")) << test::dump(eight);
  // auto: the plan decides (train::prepareRun), so neither the error nor the warning applies.
  const auto asAuto = [&](std::string text) {
    text.replace(text.find("offload_optimizer_state: true"), 29, "offload_optimizer_state: auto");
    return text;
  };
  for (const auto& [device, optimizer] : {std::pair{"cuda", "adamw8bit"}, {"cpu", "adamw"}, {"cuda", "adamw"}})
    for (const auto& p : check(asAuto(yaml(device, optimizer)), std::vector{gpu(0, 9)}))
      EXPECT_NE(p.key, key) << device << " " << optimizer << ": " << p.format();
}

TEST(Validator, BfloatLoraWeightsNeedABfloatBaseAndFp16OnesAreRefused) {
  const auto yaml = [](const std::string& trainDtype, const std::string& networkDtype) {
    return "model: {preset: tiny, random_weights: true, device: cpu}\n"  // 1
           "train:\n"                                                    // 2
           "  dtype: " +
           trainDtype +
           "\n"  // 3
           "network:\n"
           "  dtype: " +
           networkDtype +
           "\n"  // 5
           "datasets: [{type: shapes, resolution: [32]}]\n"
           "sample: {sample_every: 0}\n";
  };
  const std::string key = "network.dtype";
  for (const auto& [base, lora] : {std::pair{"bf16", "bf16"}, {"bf16", "fp32"}, {"fp32", "fp32"}, {"fp16", "fp32"}}) {
    const auto problems = check(yaml(base, lora));
    for (const auto& p : problems) EXPECT_NE(p.key, key) << base << " " << lora << ": " << p.format();
    EXPECT_EQ(parseRunConfig(yaml(base, lora), "x.yaml").config.network.dtype,
              std::string(lora) == "bf16" ? DType::BF16 : DType::FP32);
  }
  for (const char* base : {"fp32", "fp16"}) {
    const auto problems = check(yaml(base, "bf16"));
    EXPECT_TRUE(hasProblem(problems, Severity::Error, key, 5, std::string("train.dtype is ") + base + " (line 3)"))
        << test::dump(problems);
  }
  const auto fp16 = check(yaml("fp16", "fp16"));
  EXPECT_TRUE(hasProblem(fp16, Severity::Error, key, 5, "fp16 LoRA weights are not supported")) << test::dump(fp16);
  // The ai-toolkit spelling reads too, and a spelling that is no dtype is said with its line.
  EXPECT_EQ(parseRunConfig(yaml("bf16", "bfloat16"), "x.yaml").config.network.dtype, DType::BF16);
  const auto wrong = check(yaml("bf16", "int4"));
  EXPECT_TRUE(hasKey(wrong, key)) << test::dump(wrong);
}

TEST(Validator, ImagesDatasetsAreAcceptedAndEveryKeyIsRead) {
  const auto problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu, tokenizer_path: /models/flux}\n"
      "datasets:\n"
      "  - type: images\n"
      "    folder_path: /nonexistent\n"
      "    caption_ext: .caption\n"
      "    default_caption: a photo\n"
      "    trigger_word: ohwx\n"
      "    num_repeats: 3\n"
      "    flip_x: true\n"
      "    resolution: [256, 512, 1024]\n"
      "    cache_latents_to_disk: false\n"
      "  - folder_path: /nonexistent\n"  // the default type
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_EQ(countErrors(problems), 0u) << test::dump(problems);
}

TEST(Validator, DatasetKeysTheTypeDoesNotReadAreRefused) {
  const auto problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu, tokenizer_path: /models/flux}\n"
      "datasets:\n"
      "  - type: synthetic\n"               // 3
      "    caption_ext: md\n"               // 4
      "    cache_latents_to_disk: false\n"  // 5
      "    resolution: [256, 512]\n"        // 6
      "  - type: images\n"                  // 7
      "    folder_path: /nonexistent\n"
      "    num_items: 10\n"      // 9
      "    caption_ext: \"\"\n"  // 10
      "  - type: latents\n"
      "    folder_path: /nonexistent\n"
      "    num_items: 5\n"  // 13
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].caption_ext", 4, "only an images dataset"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].cache_latents_to_disk", 5, "only an images dataset"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].resolution", 6, "one resolution"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[1].num_items", 9, "only synthetic and shapes"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[1].caption_ext", 10, "not a file extension"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[2].num_items", 13, "only synthetic and shapes"))
      << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 6u) << test::dump(problems);
}

TEST(Validator, TheShapesDemoAndImagesDoNotMix) {
  const auto problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu, tokenizer_path: /models/flux}\n"
      "datasets:\n"
      "  - type: shapes\n"  // 3
      "    resolution: [32]\n"
      "  - type: images\n"
      "    folder_path: /nonexistent\n"
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].type", 3, "pixel code")) << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 1u) << test::dump(problems);
}

TEST(Validator, ARandomWeightsImagesRunStillNeedsTokenizers) {
  // A run (paths checked; "/" is a folder that exists); a preview does not read tokenizers.
  auto problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu}\n"
      "datasets: [{type: images, folder_path: /}]\n"
      "sample: {sample_every: 0}\n",
      std::nullopt, true);
  EXPECT_TRUE(hasKey(problems, "model.tokenizer_path")) << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 1u) << test::dump(problems);
  // A diffusers name_or_path gives them: not "ignored" then.
  problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu, name_or_path: /models/flux}\n"
      "datasets: [{type: images, folder_path: /nonexistent}]\n"
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_EQ(countErrors(problems), 0u) << test::dump(problems);
  EXPECT_FALSE(hasKey(problems, "model.name_or_path")) << test::dump(problems);
}

TEST(Validator, SingleFileShapeKeysNeedTheirSingleFile) {
  const auto problems = check(
      "model:\n"
      "  name_or_path: /models/flux\n"
      "  vae_norm_num_groups: 4\n"       // 3
      "  clip_num_attention_heads: 4\n"  // 4
      "datasets: [{type: images, folder_path: /nonexistent}]\n"
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.vae_norm_num_groups", 3, "model.vae_path"))
      << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.clip_num_attention_heads", 4, "model.clip_path"))
      << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 2u) << test::dump(problems);
}

TEST(Validator, SplitOverOneGpuIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  split_model_over_gpus: true\n"
      "  gpu_ids: [2]\n"  // 4
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.gpu_ids", 4, "at least two"));
}

TEST(Validator, SplitOnAMachineWithOneGpuIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  split_model_over_gpus: true\n"  // 3
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml, std::vector{gpu(0, 9)}), Severity::Error, "model.split_model_over_gpus", 3,
                         "this machine has 1"));
  // Unknown devices: no verdict on the count.
  EXPECT_FALSE(hasKey(check(yaml), "model.split_model_over_gpus"));
}

TEST(Validator, SplitOnCpuIsAnError) {
  const std::string bad =
      "model:\n"
      "  random_weights: true\n"
      "  device: cpu\n"
      "  split_model_over_gpus: true\n"  // 4
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(bad), Severity::Error, "model.split_model_over_gpus", 4, "device is cpu"));
}

TEST(Validator, GpuIdsThatDoNotExistAreErrors) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  split_model_over_gpus: true\n"
      "  gpu_ids: \"0,1,2,3\"\n"  // 4
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  const auto twoGpus = std::vector{gpu(0, 9), gpu(1, 9)};
  const auto problems = check(yaml, twoGpus);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.gpu_ids", 4, "gpu id 2 does not exist"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.gpu_ids", 4, "gpu id 3 does not exist"));
  // With four devices it is clean; unknown devices are not judged.
  EXPECT_FALSE(hasProblem(check(yaml, std::vector{gpu(0, 9), gpu(1, 9), gpu(2, 9), gpu(3, 9)}), Severity::Error,
                          "model.gpu_ids", 4));
  EXPECT_FALSE(hasKey(check(yaml), "model.gpu_ids"));
}

TEST(Validator, DuplicateGpuIdIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  gpu_ids: [0, 0]\n"  // 3
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.gpu_ids", 3, "listed twice"));
}

TEST(Validator, Bf16OnAPreAmpereCardSuggestsFp16) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  gpu_ids: \"0,1\"\n"
      "  split_model_over_gpus: true\n"
      "train:\n"
      "  dtype: bf16\n"  // 6
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  const auto v100s = std::vector{gpu(0, 7, 16, "Tesla V100"), gpu(1, 7, 16, "Tesla V100")};
  EXPECT_TRUE(hasProblem(check(yaml, v100s), Severity::Error, "train.dtype", 6, "fp16"));
  EXPECT_FALSE(hasKey(check(yaml, std::vector{gpu(0, 8), gpu(1, 8)}), "train.dtype"));
  // Default dtype (bf16, not written): the problem points at the train section or nowhere.
  const std::string noDtype =
      "model: {random_weights: true, gpu_ids: [0]}\n"
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasKey(check(noDtype, std::vector{gpu(0, 7)}), "train.dtype"));
}

// fp16 on the CPU depends on the LibTorch build (1.13 has no fp16 CPU matmul):
// where the build lacks it, the config is refused before anything runs, naming
// train.dtype and its line; where it has it, the config is clean.
TEST(Validator, Fp16OnTheCpuFollowsWhatThisLibTorchCanDo) {
  const std::string yaml = std::string(kBase) + "train:\n  dtype: fp16\n";  // dtype on line 11
  const auto problems = check(yaml);
  if (device::cpuHasHalfMatmul()) {
    EXPECT_TRUE(problems.empty()) << test::dump(problems);
  } else {
    EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.dtype", 11, "no fp16 matrix multiply on the CPU"))
        << test::dump(problems);
  }
  // On a GPU the rule does not apply.
  const std::string onGpu = std::string(yaml).replace(yaml.find("device: cpu"), 11, "device: cuda");
  for (const auto& p : check(onGpu, std::vector{gpu(0, 9, 141)})) EXPECT_NE(p.key, "train.dtype") << p.format();
}

TEST(Validator, WrongTypesAreErrorsWithTheirLine) {
  const std::string yaml = std::string(kBase) +
                           "train:\n"                            // 10
                           "  steps: many\n"                     // 11
                           "  lr: [1]\n"                         // 12
                           "  offload_checkpoints: maybe\n"      // 13
                           "  dtype: bf17\n"                     // 14
                           "  gradient_checkpointing: maybe\n";  // 15
  const auto problems = check(yaml);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.steps", 11, "expected an integer"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.lr", 12, "expected a number"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.offload_checkpoints", 13, "true or false"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.dtype", 14, "did you mean 'bf16'"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.gradient_checkpointing", 15, "auto true false"));
}

TEST(Validator, OutOfRangeNumbersAreErrors) {
  const std::string yaml = std::string(kBase) +
                           "network:\n"            // 10
                           "  linear: 0\n"         // 11
                           "  linear_alpha: -1\n"  // 12
                           "train:\n"              // 13
                           "  lr: 0\n"             // 14
                           "  steps: -5\n"         // 15
                           "  batch_size: 0\n"     // 16
                           "  ema_config:\n"       // 17
                           "    ema_decay: 1.5\n"  // 18
                           "  betas: [0.9]\n";     // 19
  const auto problems = check(yaml);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "network.linear", 11, "[1, 1024]"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "network.linear_alpha", 12, "out of range"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.lr", 14, "(0, 1]"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.steps", 15, "out of range"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.batch_size", 16, "out of range"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.ema_config.ema_decay", 18, "out of range"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "train.betas", 19, "expected 2 values"));
}

TEST(Validator, MemoryCapsOutOfRangeOrMiscountedAreErrors) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  split_model_over_gpus: true\n"
      "  gpu_ids: [0, 1, 2]\n"
      "  gpu_memory_limit_gb: [16, 0]\n"  // 5
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  const auto devices = std::vector{gpu(0, 9, 141), gpu(1, 9, 141), gpu(2, 9, 141)};
  const auto problems = check(yaml, devices);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.gpu_memory_limit_gb", 5, "out of range"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.gpu_memory_limit_gb", 5, "2 caps for 3 devices"));
}

TEST(Validator, UnknownKeysAreWarningsWithTheNearestKey) {
  const std::string yaml = std::string(kBase) +
                           "train:\n"             // 10
                           "  learnig_rate: 1\n"  // 11
                           "  stesp: 10\n"        // 12
                           "  rank: 16\n"         // 13
                           "netwrok:\n"           // 14
                           "  linear: 4\n";       // 15
  const auto problems = check(yaml);
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "train.stesp", 12, "train.steps"));
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "train.rank", 13, "network.linear"));
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "netwrok", 14, "network"));
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "train.learnig_rate", 11));
  EXPECT_FALSE(hasErrors(problems)) << test::dump(problems);
}

TEST(Validator, MissingModelPathIsAnError) {
  const std::string yaml =
      "model:\n"
      "  name_or_path: /nonexistent/FLUX.1-dev\n"  // 2
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.name_or_path", 2, "not found"));
  const std::string repoId =
      "model:\n"
      "  name_or_path: black-forest-labs/FLUX.1-dev\n"  // 2
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(repoId), Severity::Error, "model.name_or_path", 2, "local files only"));
  // random_weights needs no checkpoint; a path next to it is only a warning.
  const std::string random =
      "model:\n"
      "  name_or_path: /nonexistent/FLUX.1-dev\n"  // 2
      "  random_weights: true\n"
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  const auto problems = check(random);
  EXPECT_FALSE(hasErrors(problems)) << test::dump(problems);
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "model.name_or_path", 2, "random_weights"));
}

TEST(Validator, NoModelAtAllIsAnError) {
  const std::string yaml = "datasets: [{type: synthetic}]\nsample: {sample_every: 0}\n";
  const auto problems = check(yaml);
  ASSERT_TRUE(hasKey(problems, "model.name_or_path")) << test::dump(problems);
}

TEST(Validator, MissingDatasetFolderIsAnError) {
  strata::test::TempDir tmp;
  std::ofstream(tmp / "a_file.txt") << "x";
  const std::string bad =
      "model: {random_weights: true}\n"
      "datasets:\n"
      "  - type: latents\n"
      "    folder_path: /nonexistent/latents\n"  // 4
      "  - type: latents\n"                      // 5
      "  - type: latents\n"
      "    folder_path: " +
      (tmp / "a_file.txt").string() +
      "\n"  // 7
      "  - type: latents\n"
      "    folder_path: " +
      tmp.path().string() +
      "\n"  // 9: exists
      "sample: {sample_every: 0}\n";
  const auto problems = check(bad);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].folder_path", 4, "folder not found"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[1].folder_path", 5, "needs a folder"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[2].folder_path", 7, "not a folder"));
  EXPECT_FALSE(hasKey(problems, "datasets[3].folder_path")) << test::dump(problems);
  // --no-path-check
  EXPECT_FALSE(hasErrors(check(bad, std::nullopt, false))) << test::dump(check(bad, std::nullopt, false));
}

TEST(Validator, NoDatasetIsAnError) {
  const std::string yaml = "model: {random_weights: true}\ndatasets: []\nsample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "datasets", 2, "no dataset"));
}

TEST(Validator, SamplingWithoutPromptsIsAnError) {
  const std::string yaml =
      "model: {random_weights: true}\n"
      "datasets: [{type: synthetic}]\n"
      "sample:\n"
      "  sample_every: 100\n"  // 4
      "  prompts: []\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "sample.sample_every", 4, "no prompts"));
}

TEST(Validator, QuantizationTypesThisBuildCanOrCannotDo) {
  auto yamlFor = [](const std::string& qtype) {
    return "model:\n"
           "  random_weights: true\n"
           "  quantize: true\n"  // 3
           "  qtype: " +
           qtype +
           "\n"  // 4
           "datasets: [{type: synthetic}]\n"
           "sample: {sample_every: 0}\n";
  };
  // int8 works on every build: no error, and no "does not quantize" warning any more.
  const auto int8 = check(yamlFor("int8"));
  EXPECT_FALSE(hasErrors(int8)) << test::dump(int8);
  EXPECT_FALSE(hasProblem(int8, Severity::Warning, "model.quantize", 3, "quantize")) << test::dump(int8);
  for (const std::string q : {"qfloat8", "float8_e4m3"}) {
    const auto problems = check(yamlFor(q));
    if (compat::kHasFloat8) {
      EXPECT_FALSE(hasErrors(problems)) << q << test::dump(problems);
    } else {
      // Refused before anything runs, with int8 suggested.
      EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.qtype", 4, "float8")) << q << test::dump(problems);
      bool suggestsInt8 = false;
      for (const auto& p : problems)
        if (p.key == "model.qtype" && p.hint.find("int8") != std::string::npos) suggestsInt8 = true;
      EXPECT_TRUE(suggestsInt8) << q << test::dump(problems);
    }
  }
  const std::string int4 =
      "model:\n"
      "  random_weights: true\n"
      "  quantize: true\n"
      "  qtype: uint4\n"  // 4
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(int4), Severity::Error, "model.qtype", 4, "not supported"));
  EXPECT_EQ(qtypeAvailable("qfloat8"), compat::kHasFloat8);
  EXPECT_TRUE(qtypeAvailable("int8"));
  EXPECT_FALSE(qtypeAvailable("uint4"));
}

// A preview (`strata-train plan`) checks the qtype too, but not what this build has:
// the plan may be for another machine's.
TEST(Validator, APreviewChecksTheQtypeButNotThisBuild) {
  auto preview = [](const std::string& qtype) {
    ValidateOptions o;
    o.checkPaths = false;
    o.placementOnly = true;
    const auto loaded = parseRunConfig("model:\n  random_weights: true\n  quantize: true\n  qtype: " + qtype +
                                           "\n"  // 4
                                           "datasets: [{type: synthetic}]\nsample: {sample_every: 0}\n",
                                       "bad.yaml");
    o.where = &loaded.where;
    return validate(loaded.config, o);
  };
  EXPECT_TRUE(hasProblem(preview("int4"), Severity::Error, "model.qtype", 4, "not supported"))
      << test::dump(preview("int4"));
  EXPECT_FALSE(hasErrors(preview("int8"))) << test::dump(preview("int8"));
  EXPECT_FALSE(hasErrors(preview("qfloat8"))) << test::dump(preview("qfloat8"));  // even without float8 here
}

// A latents item's size is its file's: a resolution written for a latents dataset is
// not read, which is said (a warning: a plan made where the folder cannot be read
// falls back on it); left out, nothing is said.
TEST(Validator, AResolutionOnALatentsDatasetIsSaidNotToBeRead) {
  const auto problems = check(
      "model: {preset: tiny, random_weights: true, device: cpu}\n"
      "datasets:\n"
      "  - type: latents\n"
      "    folder_path: /nonexistent\n"
      "    resolution: [1024]\n"  // 5
      "  - type: latents\n"
      "    folder_path: /nonexistent\n"
      "sample: {sample_every: 0}\n",
      std::nullopt, false);
  EXPECT_TRUE(hasProblem(problems, Severity::Warning, "datasets[0].resolution", 5, "does not read resolution"))
      << test::dump(problems);
  EXPECT_FALSE(hasKey(problems, "datasets[1].resolution")) << test::dump(problems);
  EXPECT_EQ(countErrors(problems), 0u) << test::dump(problems);
}

TEST(Validator, QuantizeTeIsCheckedLikeTheTransformerAndNoLongerWarned) {
  auto yamlFor = [](const std::string& qtype) {
    return "model:\n"
           "  random_weights: true\n"
           "  quantize_te: true\n"  // 3
           "  qtype: " +
           qtype +
           "\n"  // 4
           "datasets: [{type: synthetic}]\n"
           "sample: {sample_every: 0}\n";
  };
  const auto int8 = check(yamlFor("int8"));
  EXPECT_FALSE(hasErrors(int8)) << test::dump(int8);
  EXPECT_FALSE(hasProblem(int8, Severity::Warning, "model.quantize_te", 3, "")) << test::dump(int8);
  const auto fp8 = check(yamlFor("qfloat8"));
  if (compat::kHasFloat8)
    EXPECT_FALSE(hasErrors(fp8)) << test::dump(fp8);
  else
    EXPECT_TRUE(hasProblem(fp8, Severity::Error, "model.qtype", 4, "float8")) << test::dump(fp8);
  EXPECT_TRUE(hasProblem(check(yamlFor("uint4")), Severity::Error, "model.qtype", 4, "not supported"));
}

TEST(Validator, ResolutionMustPackIntoLatentPatches) {
  const std::string yaml =
      "model: {random_weights: true}\n"
      "datasets:\n"
      "  - type: synthetic\n"
      "    resolution: [512, 500]\n"  // 4
      "  - type: shapes\n"
      "    resolution: 30\n"                       // 6
      "sample: {sample_every: 0, width: 1000}\n";  // 7
  const auto problems = check(yaml);
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].resolution", 4, "multiple of 16"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[1].resolution", 6, "multiple of 4"));
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "sample.width", 7, "multiple of 16"));
}

TEST(Validator, RopeAxesMustMatchHeadWidth) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  attention_head_dim: 32\n"
      "  axes_dims_rope: [8, 12, 10]\n"  // 4
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.axes_dims_rope", 4, "add up to 30"));
}

TEST(Validator, NotFluxIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  is_flux: false\n"  // 3
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.is_flux", 3));
}

TEST(Validator, CudaOnAMachineWithoutGpuIsAnError) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "  device: cuda\n"  // 3
      "datasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_TRUE(hasProblem(check(yaml, std::vector<device::DeviceInfo>{}), Severity::Error, "model.device", 3));
}

TEST(Validator, EveryProblemAtOnce) {
  const std::string yaml =
      "model:\n"
      "  split_model_over_gpus: true\n"
      "  low_vram: true\n"
      "  gpu_ids: [0]\n"
      "network: {linear: 0}\n"
      "train: {lr: -1, stepz: 3}\n"
      "datasets: []\n"
      "sample: {sample_every: 10}\n";
  const auto problems = check(yaml);
  for (const char* key : {"model.low_vram", "model.gpu_ids", "network.linear", "train.lr", "train.stepz", "datasets",
                          "sample.sample_every", "model.name_or_path"})
    EXPECT_TRUE(hasKey(problems, key)) << key << "\n" << test::dump(problems);
}

TEST(Validator, SyntaxErrorIsOneProblemWithItsLine) {
  const std::string yaml =
      "model:\n"
      "  random_weights: true\n"
      "train:\n"
      "  lr: [1e-4\n"
      "  steps: 10\n";
  const auto loaded = parseRunConfig(yaml, "bad.yaml");
  EXPECT_FALSE(loaded.readable);
  const auto problems = validateLoaded(loaded);
  ASSERT_EQ(problems.size(), 1u) << test::dump(problems);
  EXPECT_GT(problems[0].line, 0);
  EXPECT_NE(problems[0].format().find("bad.yaml:"), std::string::npos);
  EXPECT_NE(problems[0].message.find("YAML syntax error"), std::string::npos);
}

TEST(Validator, ShippedConfigsHaveNoErrors) {
  const auto dir = strata::test::sourceDir() / "configs";
  for (const char* name : {"demo.yaml", "flux-dev-split-4x16gb.yaml", "flux-dev-1gpu.yaml"}) {
    const auto loaded = loadRunConfig(dir / name);
    const auto problems = validateLoaded(loaded, std::nullopt);
    EXPECT_FALSE(hasErrors(problems)) << name << "\n" << test::dump(problems);
    EXPECT_TRUE(problems.empty()) << name << " has warnings\n" << test::dump(problems);
  }
  // The split config on the machine it was written for.
  const auto split = loadRunConfig(dir / "flux-dev-split-4x16gb.yaml");
  const auto fourAda = std::vector{gpu(0, 8, 16), gpu(1, 8, 16), gpu(2, 8, 16), gpu(3, 8, 16)};
  EXPECT_FALSE(hasErrors(validateLoaded(split, fourAda))) << test::dump(validateLoaded(split, fourAda));
  const auto fourV100 = std::vector{gpu(0, 7, 16), gpu(1, 7, 16), gpu(2, 7, 16), gpu(3, 7, 16)};
  EXPECT_TRUE(hasKey(validateLoaded(split, fourV100), "train.dtype"));
}

// model.fp8_matmul is refused before anything runs wherever the fp8 matmul cannot
// run, each time with the reason and what works instead.
TEST(Validator, Fp8MatmulIsRefusedWhereItCannotRun) {
  auto yamlFor = [](const std::string& model) {
    return "model:\n"
           "  random_weights: true\n"
           "  fp8_matmul: true\n" +  // 3
           model +
           "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n";
  };
  auto hintHas = [](const std::vector<Problem>& ps, const std::string& reason, const std::string& hint) {
    for (const auto& p : ps)
      if (p.key == "model.fp8_matmul" && p.message.find(reason) != std::string::npos &&
          p.hint.find(hint) != std::string::npos)
        return true;
    return false;
  };
  auto h200 = gpu(0, 9);
  auto a100 = gpu(0, 8, 80, "A100");
  auto ada = gpu(0, 8, 24, "L4");
  ada.ccMinor = 9;
  // Without quantize.
  const auto noQuant = check(yamlFor(""), std::vector<device::DeviceInfo>{h200});
  EXPECT_TRUE(hasProblem(noQuant, Severity::Error, "model.fp8_matmul", 3, "model.quantize is false"))
      << test::dump(noQuant);
  // With int8 weights.
  const auto int8 = check(yamlFor("  quantize: true\n  qtype: int8\n"), std::vector<device::DeviceInfo>{h200});
  EXPECT_TRUE(hintHas(int8, "qtype int8", "qfloat8")) << test::dump(int8);
  // On the CPU: by model.device, and by a machine without a GPU.
  const auto cpu = check(yamlFor("  quantize: true\n  device: cpu\n"), std::vector<device::DeviceInfo>{h200});
  EXPECT_TRUE(hintHas(cpu, "on the CPU", "dequantizing matmul works on the CPU")) << test::dump(cpu);
  const auto noGpu = check(yamlFor("  quantize: true\n"), std::vector<device::DeviceInfo>{});
  EXPECT_TRUE(hintHas(noGpu, "on the CPU", "fp8_matmul: false")) << test::dump(noGpu);
  // A card below sm_89 (an A100 is 8.0); an Ada card (8.9) and a Hopper one pass this rule.
  const auto old = check(yamlFor("  quantize: true\n"), std::vector<device::DeviceInfo>{a100});
  EXPECT_TRUE(hintHas(old, "8.9", "dequantizing matmul works on this card")) << test::dump(old);
  EXPECT_TRUE(hintHas(old, "A100", "")) << test::dump(old);
  for (const auto& card : {ada, h200}) {
    const auto ok = check(yamlFor("  quantize: true\n"), std::vector<device::DeviceInfo>{card});
    EXPECT_FALSE(hintHas(ok, "compute capability", "")) << card.name << test::dump(ok);
    // This build: only a LibTorch with _scaled_mm (2.5+) has no error at all.
    EXPECT_EQ(hasErrors(ok), !compat::kHasScaledMm) << card.name << test::dump(ok);
    EXPECT_EQ(hintHas(ok, "_scaled_mm", "dequantizing matmul works on this build"), !compat::kHasScaledMm)
        << test::dump(ok);
  }
  // fp32 training: the fp8 matmul writes bf16.
  const std::string fp32 =
      "model:\n  random_weights: true\n  quantize: true\n  fp8_matmul: true\n"
      "datasets: [{type: synthetic}]\ntrain: {dtype: fp32}\nsample: {sample_every: 0}\n";
  EXPECT_TRUE(
      hasProblem(check(fp32, std::vector<device::DeviceInfo>{h200}), Severity::Error, "train.dtype", 6, "bf16"));
  // Off (the default): none of this.
  const auto off = check(
      "model:\n  random_weights: true\n  quantize: true\n  qtype: int8\n"
      "datasets: [{type: synthetic}]\nsample: {sample_every: 0}\n",
      std::vector<device::DeviceInfo>{a100});
  EXPECT_FALSE(hintHas(off, "", "")) << test::dump(off);
}

// model.fp8_backward belongs to the fp8 matmul: alone it is refused, naming its line.
TEST(Validator, Fp8BackwardNeedsTheFp8Matmul) {
  const auto alone = check(
      "model:\n  random_weights: true\n  quantize: true\n  fp8_backward: true\n"  // 4
      "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n",
      std::vector<device::DeviceInfo>{gpu(0, 9)});
  EXPECT_TRUE(hasProblem(alone, Severity::Error, "model.fp8_backward", 4, "model.fp8_matmul is false"))
      << test::dump(alone);
  const auto withMatmul = check(
      "model:\n  random_weights: true\n  quantize: true\n  fp8_matmul: true\n  fp8_backward: true\n"
      "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n",
      std::vector<device::DeviceInfo>{gpu(0, 9)});
  EXPECT_FALSE(hasKey(withMatmul, "model.fp8_backward")) << test::dump(withMatmul);
}

// model.fp8_keep_transpose serves the fp8 backward: without it, it is refused, naming its line.
TEST(Validator, Fp8KeepTransposeNeedsTheFp8Backward) {
  const auto alone = check(
      "model:\n  random_weights: true\n  quantize: true\n  fp8_matmul: true\n  fp8_keep_transpose: true\n"  // 5
      "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n",
      std::vector<device::DeviceInfo>{gpu(0, 9)});
  EXPECT_TRUE(hasProblem(alone, Severity::Error, "model.fp8_keep_transpose", 5, "model.fp8_backward is false"))
      << test::dump(alone);
  const auto withBackward = check(
      "model:\n  random_weights: true\n  quantize: true\n  fp8_matmul: true\n  fp8_backward: true\n"
      "  fp8_keep_transpose: true\n"
      "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n",
      std::vector<device::DeviceInfo>{gpu(0, 9)});
  EXPECT_FALSE(hasKey(withBackward, "model.fp8_keep_transpose")) << test::dump(withBackward);
  EXPECT_FALSE(hasKey(withBackward, "model.fp8_backward")) << test::dump(withBackward);
}

// train.cuda_graph: true replays one recorded micro-batch: what changes between steps on
// the host (a checkpointed block's random state where LoRA dropout draws, checkpoint
// offload's per-step host buffers, fp16's loss scale) is refused, naming the line of the
// setting that conflicts; checkpointing without dropout and accumulation are allowed; on
// the CPU it is a warning. auto never gets a problem: the trainer decides.
TEST(Validator, CudaGraphRefusesWhatChangesBetweenSteps) {
  const std::string head = "model: {random_weights: true}\ndatasets: [{type: synthetic}]\nsample: {sample_every: 0}\n";
  const std::vector<device::DeviceInfo> card{gpu(0, 9)};
  auto graphErrors = [](const std::vector<Problem>& ps) {
    return std::count_if(ps.begin(), ps.end(),
                         [](const Problem& p) { return p.key == "train.cuda_graph" && p.severity == Severity::Error; });
  };
  const auto dropout = check(head +
                                 "network: {dropout: 0.1}\n"  // 4
                                 "train:\n"
                                 "  cuda_graph: true\n"               // 6
                                 "  gradient_checkpointing: true\n",  // 7
                             card);
  EXPECT_TRUE(hasProblem(dropout, Severity::Error, "train.cuda_graph", 6, "line 4")) << test::dump(dropout);
  EXPECT_TRUE(hasProblem(dropout, Severity::Error, "train.cuda_graph", 6, "random state")) << test::dump(dropout);
  // Checkpoint offload copies into host slots the runner keeps: recorded too.
  const auto offload =
      check(head + "train: {cuda_graph: true, gradient_checkpointing: true, offload_checkpoints: true}\n", card);
  EXPECT_EQ(graphErrors(offload), 0) << test::dump(offload);
  const auto fp16 = check(head + "train: {cuda_graph: true, gradient_checkpointing: false, dtype: fp16}\n", card);
  EXPECT_TRUE(hasProblem(fp16, Severity::Error, "train.cuda_graph", 4, "fp16")) << test::dump(fp16);
  // Checkpointing without dropout, and accumulation: the graph records them.
  const auto checkpointed = check(head + "train: {cuda_graph: true, gradient_checkpointing: true}\n", card);
  EXPECT_EQ(graphErrors(checkpointed), 0) << test::dump(checkpointed);
  const auto accumulated = check(head +
                                     "network: {dropout: 0.1}\n"
                                     "train: {cuda_graph: true, gradient_checkpointing: false, "
                                     "gradient_accumulation_steps: 4}\n",
                                 card);
  EXPECT_FALSE(hasKey(accumulated, "train.cuda_graph")) << test::dump(accumulated);
  // auto (the default, and written out) and false: no problem whatever the rest.
  for (const std::string mode : {"", "cuda_graph: auto, ", "cuda_graph: false, "}) {
    const auto quiet = check(head + "network: {dropout: 0.1}\ntrain: {" + mode +
                                 "gradient_checkpointing: true, offload_checkpoints: true, dtype: fp16}\n",
                             card);
    EXPECT_FALSE(hasKey(quiet, "train.cuda_graph")) << mode << test::dump(quiet);
  }
  const auto cpu = check(
      "model: {random_weights: true, device: cpu}\ndatasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\ntrain: {cuda_graph: true, gradient_checkpointing: false}\n",
      card);
  EXPECT_TRUE(hasProblem(cpu, Severity::Warning, "train.cuda_graph", 4, "on the CPU")) << test::dump(cpu);
  EXPECT_EQ(graphErrors(cpu), 0) << test::dump(cpu);
}

// cuDNN attention on a quantized base failed on the H200 in s20 (non-finite gradients,
// then an illegal memory access) and was refused; since the gradient-layout fix of s21
// the same runs train (docs/gpu-runs/2026-12-02-s23-lease*.txt), so it is allowed with
// every qtype, as flash (the default) is.
TEST(Validator, CudnnAttentionIsAllowedOnAQuantizedBase) {
  auto yamlFor = [](const std::string& model) {
    return "model:\n"
           "  random_weights: true\n"
           "  quantize: true\n" +
           model + "datasets: [{type: synthetic}]\ntrain: {dtype: bf16}\nsample: {sample_every: 0}\n";
  };
  const std::vector<device::DeviceInfo> h200{gpu(0, 9)};
  for (const auto& backend :
       {"", "  attention_backend: auto\n", "  attention_backend: flash\n", "  attention_backend: cudnn\n"})
    for (const auto& qtype : {"  qtype: int8\n", "  qtype: qfloat8\n"}) {
      const auto ps = check(yamlFor(std::string(backend) + qtype), h200);
      for (const auto& p : ps) EXPECT_NE(p.key, "model.attention_backend") << test::dump(ps);
    }
}

// random_weights with a model path that holds weights trains a LoRA on a random
// model and names the user's base: an error for every family, at random_weights.
// A weightless folder is not (a causal LM reads its shape from config.json there).
TEST(Validator, RandomWeightsWithAModelThatHoldsWeightsIsAnErrorForEveryFamily) {
  strata::test::TempDir tmp;
  std::filesystem::create_directories(tmp / "llm");
  std::ofstream(tmp / "llm" / "config.json") << "{}";
  std::ofstream(tmp / "llm" / "model.safetensors") << "x";
  std::filesystem::create_directories(tmp / "shape_only");
  std::ofstream(tmp / "shape_only" / "config.json") << "{}";
  std::filesystem::create_directories(tmp / "diffusers" / "transformer");
  std::ofstream(tmp / "diffusers" / "transformer" / "diffusion_pytorch_model.safetensors") << "x";
  std::ofstream(tmp / "flux1-dev.safetensors") << "x";

  EXPECT_TRUE(holdsWeights((tmp / "llm").string()));
  EXPECT_TRUE(holdsWeights((tmp / "diffusers").string()));
  EXPECT_TRUE(holdsWeights((tmp / "flux1-dev.safetensors").string()));
  EXPECT_FALSE(holdsWeights((tmp / "shape_only").string()));
  EXPECT_FALSE(holdsWeights((tmp / "shape_only" / "config.json").string()));
  EXPECT_FALSE(holdsWeights((tmp / "nothing").string()));

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"flux", "datasets: [{type: shapes, resolution: [32]}]\n"},
      {"flux2", "datasets: [{type: synthetic}]\n"},
      {"llama", "datasets: [{type: synthetic}]\n"},
  };
  for (const auto& [arch, datasets] : cases)
    for (const std::string model : {"llm", "diffusers", "flux1-dev.safetensors"}) {
      const std::string yaml =
          "model:\n"
          "  arch: " +
          arch +
          "\n"
          "  random_weights: true\n"  // 3
          "  device: cpu\n"
          "  name_or_path: " +
          (tmp / model).string() + "\n" +  // 5
          datasets + "sample: {sample_every: 0}\n";
      const auto problems = check(yaml);
      EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.random_weights", 3, "are not read"))
          << arch << " " << model;
      EXPECT_TRUE(hasProblem(problems, Severity::Error, "model.random_weights", 3, "line 5")) << arch << " " << model;
    }
  const std::string shapeOnly =
      "model: {arch: llama, random_weights: true, device: cpu, name_or_path: " + (tmp / "shape_only").string() +
      "}\ndatasets: [{type: synthetic}]\n"
      "sample: {sample_every: 0}\n";
  EXPECT_FALSE(hasKey(check(shapeOnly), "model.random_weights")) << test::dump(check(shapeOnly));
}

// A Hugging Face hub id as the model: the message says how to download the folder.
TEST(Validator, AHubIdSaysHowToDownloadTheFolder) {
  EXPECT_TRUE(looksLikeHubId("black-forest-labs/FLUX.1-dev"));
  EXPECT_FALSE(looksLikeHubId("/models/FLUX.1-dev"));
  EXPECT_FALSE(looksLikeHubId("./FLUX.1-dev/x"));
  EXPECT_FALSE(looksLikeHubId("a/b/c"));
  for (const std::string arch : {"flux", "llama"}) {
    const std::string repo = arch == "flux" ? "black-forest-labs/FLUX.1-dev" : "meta-llama/Meta-Llama-3-8B";
    const std::string yaml = "model: {arch: " + arch + ", device: cpu, name_or_path: " + repo +
                             "}\ndatasets: [{type: synthetic}]\nsample: {sample_every: 0}\n";
    EXPECT_TRUE(hasProblem(check(yaml), Severity::Error, "model.name_or_path", 1,
                           "huggingface-cli download " + repo + " --local-dir"))
        << arch;
  }
}

TEST(Validator, MessagesSayAnImagesDataset) {
  const auto problems = check(
      "model: {random_weights: true, device: cpu}\ndatasets: [{type: images}]\n"
      "sample: {sample_every: 0}\n");
  EXPECT_TRUE(hasProblem(problems, Severity::Error, "datasets[0].folder_path", 2, "an images dataset needs a folder"));
}

}  // namespace
}  // namespace strata::config
