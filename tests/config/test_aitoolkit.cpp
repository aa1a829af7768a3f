// Import of ai-toolkit job files.
#include <gtest/gtest.h>

#include "ConfigTestSupport.h"
#include "config/AiToolkitImporter.h"
#include "config/Validator.h"

namespace strata::config {
namespace {

// Shaped like ai-toolkit's train_lora_flux_24gb example plus the seed's split keys.
const char* kJob =
    "job: extension\n"                                           // 1
    "config:\n"                                                  // 2
    "  name: \"my_flux_lora\"\n"                                 // 3
    "  process:\n"                                               // 4
    "    - type: 'sd_trainer'\n"                                 // 5
    "      training_folder: \"output\"\n"                        // 6
    "      device: cuda:0\n"                                     // 7
    "      trigger_word: \"p3r5on\"\n"                           // 8
    "      network:\n"                                           // 9
    "        type: \"lora\"\n"                                   // 10
    "        linear: 16\n"                                       // 11
    "        linear_alpha: 16\n"                                 // 12
    "      save:\n"                                              // 13
    "        dtype: float16\n"                                   // 14
    "        save_every: 250\n"                                  // 15
    "        max_step_saves_to_keep: 4\n"                        // 16
    "        push_to_hub: false\n"                               // 17
    "      datasets:\n"                                          // 18
    "        - folder_path: \"/nonexistent/images\"\n"           // 19
    "          caption_ext: \"txt\"\n"                           // 20
    "          caption_dropout_rate: 0.1\n"                      // 21
    "          shuffle_tokens: false\n"                          // 22
    "          cache_latents_to_disk: true\n"                    // 23
    "          resolution: [ 512, 768, 1024 ]\n"                 // 24
    "      train:\n"                                             // 25
    "        batch_size: 1\n"                                    // 26
    "        steps: 2000\n"                                      // 27
    "        gradient_accumulation_steps: 1\n"                   // 28
    "        train_unet: true\n"                                 // 29
    "        train_text_encoder: false\n"                        // 30
    "        gradient_checkpointing: true\n"                     // 31
    "        noise_scheduler: \"flowmatch\"\n"                   // 32
    "        optimizer: \"adamw8bit\"\n"                         // 33
    "        lr: 1e-4\n"                                         // 34
    "        optimizer_params:\n"                                // 35
    "          weight_decay: 0.01\n"                             // 36
    "        ema_config:\n"                                      // 37
    "          use_ema: true\n"                                  // 38
    "          ema_decay: 0.99\n"                                // 39
    "        dtype: bf16\n"                                      // 40
    "        skip_first_sample: true\n"                          // 41
    "      model:\n"                                             // 42
    "        name_or_path: \"black-forest-labs/FLUX.1-dev\"\n"   // 43
    "        is_flux: true\n"                                    // 44
    "        quantize: true\n"                                   // 45
    "        low_vram: true\n"                                   // 46
    "        split_model_over_gpus: true\n"                      // 47
    "        split_model_other_module_param_count_scale: 0.3\n"  // 48
    "        gpu_ids: \"0,1,2,3\"\n"                             // 49
    "      sample:\n"                                            // 50
    "        sampler: \"flowmatch\"\n"                           // 51
    "        sample_every: 250\n"                                // 52
    "        width: 1024\n"                                      // 53
    "        height: 1024\n"                                     // 54
    "        prompts:\n"                                         // 55
    "          - \"[trigger] holding a sign\"\n"                 // 56
    "          - \"a cat\"\n"                                    // 57
    "        neg: \"\"\n"                                        // 58
    "        seed: 42\n"                                         // 59
    "        walk_seed: true\n"                                  // 60
    "        guidance_scale: 4\n"                                // 61
    "        sample_steps: 20\n"                                 // 62
    "meta:\n"                                                    // 63
    "  name: \"[name]\"\n"                                       // 64
    "  version: '1.0'\n";                                        // 65

TEST(AiToolkit, ImportsTheJobAndReportsUnusedKeys) {
  const ImportResult r = importAiToolkit(kJob, "job.yaml");
  const RunConfig& c = r.loaded.config;
  EXPECT_TRUE(r.loaded.fromAiToolkit);
  EXPECT_FALSE(hasErrors(r.loaded.problems)) << test::dump(r.loaded.problems);
  EXPECT_EQ(c.job.name, "my_flux_lora");
  EXPECT_EQ(c.job.trainingFolder, "output");
  EXPECT_EQ(c.network.linear, 16);
  EXPECT_EQ(c.save.dtype, DType::FP16);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].type, DatasetType::Images);
  EXPECT_EQ(c.datasets[0].resolution, (std::vector<int64_t>{512, 768, 1024}));
  EXPECT_DOUBLE_EQ(c.train.captionDropoutRate, 0.1);
  EXPECT_DOUBLE_EQ(c.train.weightDecay, 0.01);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-4);
  EXPECT_TRUE(c.train.ema.useEma);
  EXPECT_EQ(c.train.optimizer, OptimizerType::AdamW8bit);  // ai-toolkit's adamw8bit is kept
  EXPECT_TRUE(c.model.quantize);
  EXPECT_TRUE(c.model.quantizeTe) << "ai-toolkit's quantize_te defaults to quantize";
  EXPECT_EQ(r.loaded.where.find("model.quantize_te").line, 45);
  EXPECT_TRUE(c.model.splitModelOverGpus);
  EXPECT_EQ(c.model.gpuIds, (std::vector<int>{0, 1, 2, 3}));  // gpu_ids wins over device: cuda:0
  EXPECT_EQ(c.model.device, ComputeDevice::Cuda);
  EXPECT_EQ(c.sample.prompts.size(), 2u);
  EXPECT_DOUBLE_EQ(c.sample.guidanceScale, 4.0);

  std::map<std::string, int> unused;
  for (const auto& u : r.unused) {
    unused[u.key] = u.pos.line;
    EXPECT_FALSE(u.reason.empty()) << u.key;
  }
  const std::map<std::string, int> expected = {
      {"config.process[0].model.low_vram", 46},
      {"config.process[0].save.push_to_hub", 17},
      {"config.process[0].datasets[0].shuffle_tokens", 22},
      {"config.process[0].train.skip_first_sample", 41},
      {"config.process[0].sample.neg", 58},
      {"meta", 63},
  };
  EXPECT_EQ(unused, expected);
  // Each also shows as a warning with its line. adamw8bit is Strata's own: no warning.
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Warning, "config.process[0].sample.neg", 58));
  EXPECT_FALSE(test::hasProblem(r.loaded.problems, Severity::Warning, "train.optimizer", 33));
  // The job's trigger word is the images dataset's, at the job file's line.
  EXPECT_EQ(c.datasets[0].triggerWord, "p3r5on");
  EXPECT_EQ(r.loaded.where.find("datasets[0].trigger_word").line, 8);
  // low_vram is not taken over (Strata has nothing to switch), and the warning says why and what saves memory.
  EXPECT_FALSE(c.model.lowVram);
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Warning, "config.process[0].model.low_vram", 46,
                               "one block at a time"));
  EXPECT_TRUE(
      test::hasProblem(r.loaded.problems, Severity::Warning, "config.process[0].model.low_vram", 46, "model.quantize"));
}

TEST(AiToolkit, ValidationPointsAtTheJobFileLines) {
  const ImportResult r = importAiToolkit(kJob, "job.yaml");
  const auto problems = validateLoaded(r.loaded);
  EXPECT_FALSE(test::hasKey(problems, "model.low_vram")) << test::dump(problems);
  EXPECT_TRUE(test::hasProblem(problems, Severity::Error, "model.name_or_path", 43, "local files only"));
  // A hub id: how to get the folder, with the repository's own name.
  EXPECT_TRUE(test::hasProblem(problems, Severity::Error, "model.name_or_path", 43,
                               "huggingface-cli download black-forest-labs/FLUX.1-dev --local-dir"));
  EXPECT_TRUE(test::hasProblem(problems, Severity::Error, "datasets[0].folder_path", 19));
}

// ai-toolkit's trigger_word is the job's; Strata's is per images dataset: each dataset
// without its own gets it, one with its own keeps it, and a job without a dataset says so.
TEST(AiToolkit, TriggerWordGoesToEachImagesDataset) {
  auto job = [](const std::string& datasets) {
    return "job: extension\n"
           "config:\n"
           "  name: t\n"
           "  process:\n"
           "    - type: sd_trainer\n"
           "      trigger_word: ohwx\n" +  // 6
           datasets;
  };
  {
    const ImportResult r =
        importAiToolkit(job("      datasets:\n"
                            "        - folder_path: /a\n"
                            "        - folder_path: /b\n"
                            "          trigger_word: own\n"));
    ASSERT_EQ(r.loaded.config.datasets.size(), 2u);
    EXPECT_EQ(r.loaded.config.datasets[0].triggerWord, "ohwx");
    EXPECT_EQ(r.loaded.config.datasets[1].triggerWord, "own");
    EXPECT_EQ(r.loaded.where.find("datasets[0].trigger_word").line, 6);
    EXPECT_TRUE(r.unused.empty());
  }
  {
    const ImportResult r = importAiToolkit(job(""));
    ASSERT_EQ(r.unused.size(), 1u);
    EXPECT_EQ(r.unused[0].key, "config.process[0].trigger_word");
    EXPECT_NE(r.unused[0].reason.find("no images dataset"), std::string::npos) << r.unused[0].reason;
  }
}

TEST(AiToolkit, LoadRunConfigRecognisesJobFiles) {
  const LoadedConfig l = parseRunConfig(kJob, "job.yaml");
  EXPECT_TRUE(l.fromAiToolkit);
  EXPECT_EQ(l.config.job.name, "my_flux_lora");
  EXPECT_EQ(l.where.find("train.lr").line, 34);
}

TEST(AiToolkit, WrongValuesAndShapesAreErrors) {
  const char* bad =
      "job: extension\n"
      "config:\n"
      "  name: x\n"
      "  process:\n"
      "    - type: sd_trainer\n"
      "      device: tpu\n"  // 6
      "      train:\n"
      "        steps: lots\n"         // 8
      "        optimizer: prodigy\n"  // 9
      "      datasets: 5\n";          // 10
  const ImportResult r = importAiToolkit(bad, "bad.yaml");
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Error, "config.process[0].device", 6));
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Error, "train.steps", 8));
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Warning, "train.optimizer", 9, "prodigy"));
  EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Error, "config.process[0].datasets", 10));

  EXPECT_TRUE(hasErrors(importAiToolkit("model: {}\n").loaded.problems));
  EXPECT_TRUE(hasErrors(importAiToolkit("job: extension\nconfig: {name: x}\n").loaded.problems));
  EXPECT_TRUE(hasErrors(importAiToolkit("job: extension\nconfig: {process: []}\n").loaded.problems));
  EXPECT_TRUE(hasErrors(importAiToolkit("job: extension\nconfig: [\n").loaded.problems));
}

// ai-toolkit's text encoder quantization: quantize_te defaults to quantize, and the type
// is qtype_te (default qfloat8), where Strata quantizes both with model.qtype.
TEST(AiToolkit, TextEncoderQuantizationFollowsAiToolkitsDefaults) {
  auto job = [](const std::string& modelLines) {
    return "job: extension\n"
           "config:\n"
           "  process:\n"
           "    - type: sd_trainer\n"
           "      model:\n"  // 5
           "        is_flux: true\n" +
           modelLines;  // from line 7
  };
  {  // quantize alone, qtype as qtype_te's default: the text encoder too, nothing to say
    const ImportResult r = importAiToolkit(job("        quantize: true\n"));
    EXPECT_TRUE(r.loaded.config.model.quantizeTe);
    EXPECT_TRUE(r.loaded.problems.empty()) << test::dump(r.loaded.problems);
  }
  {  // quantize_te: false wins
    const ImportResult r = importAiToolkit(job("        quantize: true\n        quantize_te: false\n"));
    EXPECT_TRUE(r.loaded.config.model.quantize);
    EXPECT_FALSE(r.loaded.config.model.quantizeTe);
  }
  {  // qtype int8 where ai-toolkit would quantize the text encoder as qfloat8: said, at qtype's line
    const ImportResult r = importAiToolkit(job("        quantize: true\n        qtype: int8\n"));
    EXPECT_TRUE(r.loaded.config.model.quantizeTe);
    EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Warning, "model.qtype", 8, "qtype_te default"))
        << test::dump(r.loaded.problems);
  }
  {  // qtype_te equal to qtype: nothing to say, and qtype_te is not an unused key
    const ImportResult r =
        importAiToolkit(job("        quantize: true\n        qtype: int8\n        qtype_te: int8\n"));
    EXPECT_TRUE(r.loaded.problems.empty()) << test::dump(r.loaded.problems);
    EXPECT_TRUE(r.unused.empty());
  }
  {  // qtype_te different from qtype: said at qtype_te's line
    const ImportResult r = importAiToolkit(job("        quantize: true\n        qtype_te: int8\n"));
    EXPECT_TRUE(test::hasProblem(r.loaded.problems, Severity::Warning, "config.process[0].model.qtype_te", 8,
                                 "quantizes it with model.qtype (qfloat8)"))
        << test::dump(r.loaded.problems);
  }
  {  // no text encoder quantization: qtype_te is unused
    const ImportResult r = importAiToolkit(job("        quantize: false\n        qtype_te: int8\n"));
    EXPECT_FALSE(r.loaded.config.model.quantizeTe);
    ASSERT_EQ(r.unused.size(), 1u);
    EXPECT_EQ(r.unused[0].key, "config.process[0].model.qtype_te");
    EXPECT_EQ(r.unused[0].pos.line, 8);
  }
}

TEST(AiToolkit, ExtraProcessesAreReported) {
  const char* two =
      "job: extension\n"
      "config:\n"
      "  process:\n"
      "    - type: sd_trainer\n"
      "    - type: sd_trainer\n";  // 5
  const ImportResult r = importAiToolkit(two);
  ASSERT_EQ(r.unused.size(), 1u);
  EXPECT_EQ(r.unused[0].key, "config.process[1]");
  EXPECT_EQ(r.unused[0].pos.line, 5);
}

}  // namespace
}  // namespace strata::config
