// The schema table, generic get/set, YAML round trip and atomic save.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ConfigTestSupport.h"
#include "common/Error.h"
#include "common/TestSupport.h"
#include "config/ConfigSchema.h"
#include "config/RunConfigYaml.h"

namespace strata::config {
namespace {

namespace fs = std::filesystem;

TEST(Schema, EveryKeyHasTypeDocDefaultAndAccessors) {
  std::set<std::string> paths;
  for (const KeySpec& k : schema()) {
    EXPECT_TRUE(paths.insert(k.path).second) << "duplicate " << k.path;
    EXPECT_FALSE(k.doc.empty()) << k.path;
    EXPECT_TRUE(k.get && k.set) << k.path;
    if (k.type == KeyType::Choice || k.type == KeyType::ChoiceList) EXPECT_FALSE(k.choices.empty()) << k.path;
    if (!k.nullable) EXPECT_FALSE(std::holds_alternative<std::monostate>(k.defaultValue)) << k.path;
  }
  // The seed's keys and Strata's additions are all there.
  for (const char* key : {"model.quantize", "model.quantize_te", "model.low_vram", "model.split_model_over_gpus",
                          "model.split_model_other_module_param_count_scale", "model.gpu_ids", "model.placement",
                          "model.gpu_memory_limit_gb", "train.ema_config.use_ema", "save.export_formats",
                          "datasets[].folder_path", "sample.prompts", "network.linear"})
    EXPECT_NE(findKey(key), nullptr) << key;
  EXPECT_EQ(findKey("train.lr")->defaultValue, Value{1e-4});
  EXPECT_EQ(findKey("model.gpu_memory_limit_gb")->unit, "GB");
  EXPECT_EQ(findKey("train.dtype")->choices, (std::vector<std::string>{"bf16", "fp16", "fp32"}));
  EXPECT_EQ(findKey("network.linear")->rangeText(), "[1, 1024]");
  EXPECT_EQ(findKey("datasets[7].folder_path"), findKey("datasets[].folder_path"));
  EXPECT_EQ(findKey("train.nope"), nullptr);
}

// The form reads its labels, groups and choosers from the spec, so every key
// must carry them (a key added without them would show up as a bare path).
TEST(Schema, EveryKeyHasFormLabelGroupAndPathKind) {
  const std::vector<std::string>& groups = keyGroups();
  int basic = 0;
  for (const KeySpec& k : schema()) {
    EXPECT_FALSE(k.label.empty()) << k.path << " has no label";
    EXPECT_NE(std::find(groups.begin(), groups.end(), k.group), groups.end()) << k.path << ": " << k.group;
    EXPECT_EQ(k.type == KeyType::Path, k.pathKind != PathKind::None) << k.path;
    EXPECT_EQ(k.modelShape, k.group == "Model shape") << k.path;
    if (k.modelShape) EXPECT_FALSE(k.basic) << k.path;
    basic += k.basic ? 1 : 0;
  }
  EXPECT_GE(basic, 8);
  EXPECT_LT(basic, int(schema().size()) / 2);  // Basic is the short list
  EXPECT_EQ(findKey("model.name_or_path")->pathKind, PathKind::FileOrFolder);
  EXPECT_EQ(findKey("datasets[0].folder_path")->pathKind, PathKind::Folder);
  EXPECT_EQ(findKey("job.training_folder")->pathKind, PathKind::Folder);
  EXPECT_EQ(findKey("network.linear")->label, "Rank");
  EXPECT_TRUE(findKey("model.num_layers")->modelShape);
}

TEST(Schema, GenericGetAndSet) {
  RunConfig c;
  setValueText(c, "train.lr", "2e-4");
  EXPECT_DOUBLE_EQ(c.train.lr, 2e-4);
  EXPECT_EQ(getValueText(c, "train.lr"), "0.0002");
  setValueText(c, "model.gpu_ids", "0,1,2,3");
  EXPECT_EQ(c.model.gpuIds, (std::vector<int>{0, 1, 2, 3}));
  setValueText(c, "model.gpu_ids", "[2, 3]");
  EXPECT_EQ(c.model.gpuIds, (std::vector<int>{2, 3}));
  setValueText(c, "model.gpu_memory_limit_gb", "16");
  EXPECT_EQ(c.model.gpuMemoryLimitGb, (std::vector<double>{16.0}));
  setValueText(c, "train.dtype", "float16");  // ai-toolkit's spelling
  EXPECT_EQ(c.train.dtype, DType::FP16);
  EXPECT_EQ(getValueText(c, "train.dtype"), "fp16");
  setValueText(c, "job.name", "a: b # not a comment");
  EXPECT_EQ(c.job.name, "a: b # not a comment");
  setValueText(c, "sample.prompts", "[\"a cat\", \"a dog\"]");
  EXPECT_EQ(c.sample.prompts, (std::vector<std::string>{"a cat", "a dog"}));
  setValueText(c, "sample.prompts", "one prompt");
  EXPECT_EQ(c.sample.prompts, (std::vector<std::string>{"one prompt"}));
  setValue(c, "train.ema_config.use_ema", Value{true});
  EXPECT_TRUE(c.train.ema.useEma);
  setValueText(c, "model.num_layers", "3");
  EXPECT_EQ(c.model.numLayers, 3);
  setValueText(c, "model.num_layers", "");
  EXPECT_FALSE(c.model.numLayers.has_value());
  // Datasets grow by one.
  setValueText(c, "datasets[0].folder_path", "/data/a");
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].folderPath, "/data/a");
  EXPECT_EQ(std::get<std::string>(getValue(c, "datasets[0].type")), "images");
  EXPECT_THROW(setValueText(c, "datasets[5].folder_path", "x"), ConfigError);
  EXPECT_THROW(getValue(c, "datasets[1].folder_path"), ConfigError);
  // Bad values name the key.
  try {
    setValueText(c, "train.steps", "lots");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.steps"), std::string::npos) << e.what();
  }
  EXPECT_THROW(setValueText(c, "train.dtype", "bf17"), ConfigError);
  EXPECT_THROW(setValueText(c, "train.nope", "1"), ConfigError);
  EXPECT_THROW(setValue(c, "train.lr", Value{std::string("x")}), ConfigError);
}

TEST(Schema, EditDistance) {
  EXPECT_EQ(editDistance("steps", "stesp"), 2u);
  EXPECT_EQ(editDistance("", "abc"), 3u);
  EXPECT_EQ(editDistance("lr", "lr"), 0u);
}

TEST(Schema, FormatDoubleIsShortestExact) {
  for (double v : {1e-4, 0.1, 1.0, 0.999, 1e-8, 3.5, 123456.789, 2.0 / 3.0}) {
    const std::string s = formatDouble(v);
    EXPECT_EQ(std::stod(s), v) << s;
  }
  EXPECT_EQ(formatDouble(1e-4), "0.0001");
  EXPECT_EQ(formatDouble(1.0), "1.0");
}

RunConfig unusualConfig() {
  RunConfig c;
  c.job.name = "name: with colon";
  c.job.trainingFolder = "/tmp/out dir";
  c.model.nameOrPath = "";
  c.model.preset = "tiny";
  c.model.numLayers = 3;
  c.model.guidanceEmbeds = false;
  c.model.axesDimsRope = {8, 12, 12};
  c.model.gpuIds = {0, 2};
  c.model.gpuMemoryLimitGb = {15.5, 16};
  c.model.placement = PlacementMode::Memory;
  c.model.splitModelOtherModuleParamCountScale = 0.1;
  c.model.quantize = true;  // the fp8 keys are bools away from their defaults too
  c.model.fp8Matmul = true;
  c.model.fp8Backward = true;
  c.model.fp8KeepTranspose = true;
  c.network.targetModules = {"*attn*", "proj_out"};
  c.train.lr = 3e-5;
  c.train.betas = {0.8, 0.95};
  c.train.lrScheduler = LrScheduler::Cosine;
  c.train.ema.useEma = true;
  c.train.ema.emaDecay = 0.995;
  c.train.offloadOptimizerState = true;
  c.train.cudaGraph = config::CudaGraphMode::On;
  c.datasets.resize(2);
  c.datasets[0].folderPath = "/data/imgs";
  c.datasets[0].resolution = {512, 768, 1024};
  c.datasets[1].type = DatasetType::Shapes;
  c.datasets[1].defaultCaption = "yes";  // a string YAML 1.1 would read as a bool
  c.sample.prompts = {"a \"quoted\" prompt", "two\nlines", "#not a comment", "", "true"};
  c.save.exportFormats = {ExportFormat::Kohya, ExportFormat::Comfy};
  c.save.dtype = DType::BF16;
  return c;
}

TEST(Yaml, RoundTrips) {
  for (const RunConfig& c : {RunConfig{}, unusualConfig()}) {
    const std::string text = toYaml(c);
    const LoadedConfig back = parseRunConfig(text, "saved.yaml");
    EXPECT_TRUE(back.problems.empty()) << test::dump(back.problems) << text;
    EXPECT_TRUE(back.config == c) << text;
    EXPECT_EQ(toYaml(back.config), text);
  }
  RunConfig changed = unusualConfig();
  changed.sample.prompts.pop_back();
  EXPECT_FALSE(parseRunConfig(toYaml(unusualConfig())).config == changed);
}

// train.cuda_graph was a bool: true and false (and YAML 1.1's other spellings) read as
// before; auto is the default; each mode writes and reads back as itself.
TEST(Yaml, CudaGraphReadsAutoTrueAndFalse) {
  EXPECT_EQ(RunConfig{}.train.cudaGraph, CudaGraphMode::Auto);
  const std::vector<std::pair<std::string, CudaGraphMode>> spellings = {
      {"auto", CudaGraphMode::Auto},   {"true", CudaGraphMode::On},    {"false", CudaGraphMode::Off},
      {"yes", CudaGraphMode::On},      {"off", CudaGraphMode::Off},    {"True", CudaGraphMode::On},
      {"\"true\"", CudaGraphMode::On}, {"'auto'", CudaGraphMode::Auto}};
  for (const auto& [text, mode] : spellings) {
    const LoadedConfig loaded = parseRunConfig("train:\n  cuda_graph: " + text + "\n", "graph.yaml");
    EXPECT_TRUE(loaded.problems.empty()) << text << "\n" << test::dump(loaded.problems);
    EXPECT_EQ(loaded.config.train.cudaGraph, mode) << text;
    const LoadedConfig back = parseRunConfig(toYaml(loaded.config));
    EXPECT_EQ(back.config.train.cudaGraph, mode) << text << "\n" << toYaml(loaded.config);
  }
  const LoadedConfig bad = parseRunConfig("train:\n  cuda_graph: sometimes\n", "graph.yaml");
  ASSERT_FALSE(bad.problems.empty());
  EXPECT_EQ(bad.problems.front().key, "train.cuda_graph") << test::dump(bad.problems);
  EXPECT_NE(bad.problems.front().message.find("auto"), std::string::npos) << test::dump(bad.problems);
  // --set on the command line: the same spellings.
  RunConfig set;
  setValueText(set, "train.cuda_graph", "false");
  EXPECT_EQ(set.train.cudaGraph, CudaGraphMode::Off);
  setValueText(set, "train.cuda_graph", "true");
  EXPECT_EQ(set.train.cudaGraph, CudaGraphMode::On);
  setValueText(set, "train.cuda_graph", "auto");
  EXPECT_EQ(set.train.cudaGraph, CudaGraphMode::Auto);
}

// train.offload_optimizer_state was a bool: true and false (and YAML 1.1's other spellings)
// read as before, false stays the default, auto (the plan decides) writes and reads back as itself.
TEST(Yaml, OffloadOptimizerStateReadsAutoTrueAndFalse) {
  EXPECT_FALSE(RunConfig{}.train.offloadOptimizerState);
  EXPECT_FALSE(RunConfig{}.train.offloadOptimizerStateAuto);
  struct Spelling {
    std::string text;
    bool on, isAuto;
  };
  const std::vector<Spelling> spellings = {{"auto", false, true}, {"true", true, false}, {"false", false, false},
                                           {"yes", true, false},  {"off", false, false}, {"'auto'", false, true}};
  for (const auto& s : spellings) {
    const LoadedConfig loaded = parseRunConfig("train:\n  offload_optimizer_state: " + s.text + "\n", "opt.yaml");
    EXPECT_TRUE(loaded.problems.empty()) << s.text << "\n" << test::dump(loaded.problems);
    EXPECT_EQ(loaded.config.train.offloadOptimizerState, s.on) << s.text;
    EXPECT_EQ(loaded.config.train.offloadOptimizerStateAuto, s.isAuto) << s.text;
    const std::string saved = toYaml(loaded.config);
    EXPECT_NE(saved.find(std::string("offload_optimizer_state: ") + (s.isAuto ? "auto"
                                                                     : s.on   ? "true"
                                                                              : "false")),
              std::string::npos)
        << saved;
    EXPECT_TRUE(parseRunConfig(saved).config == loaded.config) << s.text << "\n" << saved;
  }
  const LoadedConfig bad = parseRunConfig("train:\n  offload_optimizer_state: sometimes\n", "opt.yaml");
  ASSERT_FALSE(bad.problems.empty());
  EXPECT_EQ(bad.problems.front().key, "train.offload_optimizer_state") << test::dump(bad.problems);
  // auto and on differ as configs (operator==), and the editor's choices offer all three.
  RunConfig a, b;
  setValueText(a, "train.offload_optimizer_state", "auto");
  EXPECT_FALSE(a == b);
  setValueText(a, "train.offload_optimizer_state", "false");
  EXPECT_TRUE(a == b);
  const auto row = std::find_if(schema().begin(), schema().end(),
                                [](const KeySpec& k) { return k.path == "train.offload_optimizer_state"; });
  ASSERT_NE(row, schema().end());
  EXPECT_EQ(row->choices, (std::vector<std::string>{"auto", "true", "false"}));
}

TEST(Yaml, ShippedConfigsRoundTrip) {
  for (const char* name : {"demo.yaml", "flux-dev-split-4x16gb.yaml", "flux-dev-1gpu.yaml"}) {
    const auto loaded = loadRunConfig(strata::test::sourceDir() / "configs" / name);
    EXPECT_TRUE(loaded.problems.empty()) << name << "\n" << test::dump(loaded.problems);
    EXPECT_TRUE(parseRunConfig(toYaml(loaded.config)).config == loaded.config) << name;
  }
}

TEST(Yaml, KeepsLineAndColumnOfEveryKey) {
  const std::string yaml =
      "# comment\n"
      "model:\n"
      "  gpu_ids: \"0,1\"\n"
      "train:\n"
      "  ema_config:\n"
      "    use_ema: true\n"
      "datasets:\n"
      "  - type: shapes\n"
      "    num_items: 5\n";
  const LoadedConfig l = parseRunConfig(yaml, "x.yaml");
  EXPECT_TRUE(l.problems.empty()) << test::dump(l.problems);
  EXPECT_EQ(l.where.file, "x.yaml");
  EXPECT_EQ(l.where.find("model").line, 2);
  EXPECT_EQ(l.where.find("model.gpu_ids").line, 3);
  EXPECT_EQ(l.where.find("model.gpu_ids").column, 3);
  EXPECT_EQ(l.where.find("train.ema_config.use_ema").line, 6);
  EXPECT_EQ(l.where.find("train.ema_config.use_ema").column, 5);
  EXPECT_EQ(l.where.find("datasets[0].num_items").line, 9);
  // A key not written falls back to its section.
  EXPECT_EQ(l.where.find("train.lr").line, 4);
  EXPECT_EQ(l.where.find("sample.seed").line, 0);
  EXPECT_EQ(l.config.datasets.at(0).numItems, 5);
  EXPECT_EQ(l.config.model.gpuIds, (std::vector<int>{0, 1}));
}

TEST(Yaml, BadDocumentsAreProblemsNotExceptions) {
  for (const char* text :
       {"", "   \n", "- a\n- b\n", "model: [\n", "model:\n  lr: \"unterminated\n", "a: *nope\n", "\t\tmodel:\n",
        "model: {a: 1, a: 2}\n", "datasets: 3\n", "datasets: [3]\n", "train: 5\n", "[1, 2]: x\n"}) {
    LoadedConfig l;
    ASSERT_NO_THROW(l = parseRunConfig(text, "t.yaml")) << text;
    EXPECT_FALSE(l.problems.empty()) << "no problem for: " << text;
    for (const auto& p : l.problems) EXPECT_EQ(p.format().find('\n') == std::string::npos || !p.hint.empty(), true);
  }
}

TEST(Yaml, DuplicateKeysAreErrors) {
  const LoadedConfig l = parseRunConfig("model:\n  low_vram: false\n  low_vram: true\n", "d.yaml");
  EXPECT_TRUE(test::hasProblem(l.problems, Severity::Error, "model.low_vram", 3, "first at line 2"));
  EXPECT_TRUE(l.config.model.lowVram);  // the last one, as PyYAML (ai-toolkit) reads it
}

TEST(Yaml, TruncatedFileGivesOneClearError) {
  const std::string full = toYaml(unusualConfig());
  // Every prefix must parse without an exception; cutting inside a quoted string is
  // a syntax error with a line.
  for (size_t n = 0; n < full.size(); n += 7) {
    LoadedConfig l;
    ASSERT_NO_THROW(l = parseRunConfig(full.substr(0, n), "cut.yaml")) << n;
  }
  const size_t quote = full.find("\"a \\\"quoted");
  ASSERT_NE(quote, std::string::npos);
  const LoadedConfig l = parseRunConfig(full.substr(0, quote + 5), "cut.yaml");
  ASSERT_EQ(l.problems.size(), 1u) << test::dump(l.problems);
  EXPECT_FALSE(l.readable);
  EXPECT_GT(l.problems[0].line, 0);
}

TEST(Yaml, SaveIsAtomicAndLoadable) {
  strata::test::TempDir tmp;
  const fs::path p = tmp / "run.yaml";
  const RunConfig c = unusualConfig();
  saveRunConfig(c, p);
  EXPECT_TRUE(loadRunConfig(p).config == c);
  // Overwrite; no temp files left next to it.
  saveRunConfig(RunConfig{}, p);
  EXPECT_TRUE(loadRunConfig(p).config == RunConfig{});
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
  EXPECT_THROW(saveRunConfig(c, tmp / "no_such_dir" / "x.yaml"), IoError);
}

TEST(Yaml, UnreadableFilesThrowIoError) {
  strata::test::TempDir tmp;
  EXPECT_THROW(loadRunConfig(tmp / "missing.yaml"), IoError);
  EXPECT_THROW(loadRunConfig(tmp.path()), IoError);
  std::ofstream(tmp / "bin.yaml", std::ios::binary) << std::string("model:\0\x01\x02", 9);
  EXPECT_THROW(loadRunConfig(tmp / "bin.yaml"), IoError);
}

TEST(Yaml, OverridesApplyAndReportProblems) {
  LoadedConfig l = parseRunConfig("train:\n  lr: 0.0001\n", "o.yaml");
  applyOverrides(l, {"train.lr=2e-4", "model.gpu_ids=0,1", "train.stesp=3", "train.steps=abc", "novalue"});
  EXPECT_DOUBLE_EQ(l.config.train.lr, 2e-4);
  EXPECT_EQ(l.config.model.gpuIds, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.where.find("train.lr").origin, "--set train.lr=2e-4");
  ASSERT_EQ(countErrors(l.problems), 3u) << test::dump(l.problems);
  EXPECT_TRUE(test::hasKey(l.problems, "train.stesp"));
  EXPECT_NE(l.problems[0].hint.find("train.steps"), std::string::npos) << l.problems[0].format();
  EXPECT_EQ(l.problems[1].file, "--set train.steps=abc");
}

}  // namespace
}  // namespace strata::config
