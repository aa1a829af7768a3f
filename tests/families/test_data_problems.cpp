// What a config's datasets give before a run (train::dataProblems, the family's
// ModelFamily::dataProblems): a jsonl file or image folder that yields no sample
// and a missing tokenizer are errors under their key, with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/TestSupport.h"
#include "config/RunConfigYaml.h"
#include "LmTestSupport.h"
#include "train/ModelFamily.h"

namespace strata {
namespace {

const config::Problem* find(const std::vector<config::Problem>& problems, const std::string& key) {
  for (const auto& p : problems)
    if (p.key == key) return &p;
  return nullptr;
}

std::string all(const std::vector<config::Problem>& problems) {
  std::string s;
  for (const auto& p : problems) s += p.format() + "\n";
  return s;
}

class DataProblemsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "model");
    std::ofstream(dir_ / "model" / "config.json") << "{}";
  }
  config::LoadedConfig llama(const std::string& jsonl) {
    test::writeText(dir_ / "data.jsonl", jsonl);
    return config::parseRunConfig(
        "model: {arch: llama, random_weights: true, name_or_path: " + (dir_ / "model").string() +
            "}\n"
            "datasets:\n"
            "  - type: jsonl\n"
            "    file_path: " +  // 4
            (dir_ / "data.jsonl").string() +
            "\nsample: {sample_every: 0}\n",
        "run.yaml");
  }
  test::TempDir dir_;
};

TEST_F(DataProblemsTest, AJsonlFileWithNoUsableLineIsAnErrorThatNamesItsFields) {
  test::writeCharTokenizer(dir_ / "model", 128);
  const auto loaded = llama("{\"question\": \"a\", \"answer\": \"b\"}\n\n{\"question\": \"c\", \"answer\": \"d\"}\n");
  const auto problems = train::dataProblems(loaded.config, &loaded.where);
  const config::Problem* p = find(problems, "datasets[0].file_path");
  ASSERT_NE(p, nullptr) << all(problems);
  EXPECT_TRUE(p->isError());
  EXPECT_EQ(p->line, 4);
  EXPECT_NE(p->message.find("no usable sample"), std::string::npos) << p->message;
  // One reason, said once with its lines (the blank line 2 is not a reason).
  EXPECT_NE(p->message.find("lines 1, 3: no field 'prompt'"), std::string::npos) << p->message;
  EXPECT_NE(p->message.find("the line has: question, answer"), std::string::npos) << p->message;
  EXPECT_NE(p->hint.find("prompt_field"), std::string::npos) << p->hint;

  // One usable line (a common layout) is enough.
  const auto ok = llama("{\"question\": \"a\"}\n{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  EXPECT_EQ(find(train::dataProblems(ok.config, &ok.where), "datasets[0].file_path"), nullptr)
      << all(train::dataProblems(ok.config, &ok.where));
}

TEST_F(DataProblemsTest, AMissingTokenizerIsAnErrorWhenTheRunReadsText) {
  const auto loaded = llama("{\"prompt\": \"a\", \"response\": \"b\"}\n");
  auto problems = train::dataProblems(loaded.config, &loaded.where);
  const config::Problem* p = find(problems, "model.name_or_path");
  ASSERT_NE(p, nullptr) << all(problems);
  EXPECT_NE(p->message.find("no tokenizer"), std::string::npos) << p->message;
  EXPECT_NE(p->hint.find("tokenizer_path"), std::string::npos) << p->hint;
  // A synthetic dataset without sample prompts reads no text.
  config::RunConfig synthetic = loaded.config;
  synthetic.datasets[0].type = config::DatasetType::Synthetic;
  EXPECT_TRUE(train::dataProblems(synthetic).empty()) << all(train::dataProblems(synthetic));
  // With the tokenizer there, nothing to say.
  test::writeCharTokenizer(dir_ / "model", 128);
  problems = train::dataProblems(loaded.config, &loaded.where);
  EXPECT_TRUE(problems.empty()) << all(problems);
}

TEST_F(DataProblemsTest, AnImageFolderWithNoUsableImageIsAnError) {
  std::filesystem::create_directories(dir_ / "images");
  std::ofstream(dir_ / "images" / "notes.txt") << "not an image";
  std::ofstream(dir_ / "images" / "broken.png") << "not a png";
  const config::LoadedConfig loaded = config::parseRunConfig(
      "model: {random_weights: true, device: cpu}\n"
      "datasets:\n"
      "  - type: images\n"
      "    folder_path: " +  // 4
          (dir_ / "images").string() +
          "\n",
      "run.yaml");
  const auto problems = train::dataProblems(loaded.config, &loaded.where);
  const config::Problem* p = find(problems, "datasets[0].folder_path");
  ASSERT_NE(p, nullptr) << all(problems);
  EXPECT_EQ(p->line, 4);
  EXPECT_NE(p->message.find("no usable image"), std::string::npos) << p->message;
  EXPECT_NE(p->message.find("broken.png"), std::string::npos) << p->message;

  std::filesystem::remove(dir_ / "images" / "broken.png");
  const auto empty = train::dataProblems(loaded.config, &loaded.where);
  ASSERT_NE(find(empty, "datasets[0].folder_path"), nullptr) << all(empty);
  EXPECT_NE(find(empty, "datasets[0].folder_path")->message.find("no image in"), std::string::npos);
}

}  // namespace
}  // namespace strata
