// Bad tokenizer files fail with a typed error naming the file (and the key or
// line): missing files, truncated JSON, unknown model types, bad merges.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;
using namespace strata;
using text::TokenizerKind;

namespace {

void writeFile(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The IoError message of opening `dir`; fails the test if it opens.
std::string openError(const fs::path& dir, TokenizerKind kind = TokenizerKind::kAuto) {
  try {
    text::openTokenizer(dir, kind);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << dir << " opened, expected an IoError";
  return "";
}

fs::path fixture(const char* name) { return test::referenceDir() / name; }

nlohmann::json lmJson() { return nlohmann::json::parse(readFile(fixture("lm_tokenizer_a") / "tokenizer.json")); }

}  // namespace

TEST(TokenizerErrors, MissingFolderAndEmptyFolder) {
  test::TempDir tmp;
  EXPECT_NE(openError(tmp / "nope").find("tokenizer folder not found"), std::string::npos);
  const std::string empty = openError(tmp.path());
  EXPECT_NE(empty.find(tmp.path().string()), std::string::npos) << empty;
  EXPECT_NE(empty.find("no tokenizer files"), std::string::npos) << empty;
}

TEST(TokenizerErrors, ClipWithoutMergesNamesMergesTxt) {
  test::TempDir tmp;
  fs::copy_file(fixture("clip_tokenizer_a") / "vocab.json", tmp / "vocab.json");
  const std::string e = openError(tmp.path(), TokenizerKind::kClip);
  EXPECT_NE(e.find((tmp / "merges.txt").string()), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST(TokenizerErrors, T5WithoutSpieceNamesSpieceModel) {
  test::TempDir tmp;
  writeFile(tmp / "tokenizer_config.json", R"({"tokenizer_class": "T5Tokenizer"})");
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find((tmp / "spiece.model").string()), std::string::npos) << e;
}

TEST(TokenizerErrors, TruncatedJsonNamesTheFile) {
  test::TempDir tmp;
  const std::string full = readFile(fixture("lm_tokenizer_a") / "tokenizer.json");
  writeFile(tmp / "tokenizer.json", full.substr(0, full.size() / 2));
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find((tmp / "tokenizer.json").string()), std::string::npos) << e;
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  fs::copy_file(fixture("clip_tokenizer_a") / "merges.txt", tmp / "merges.txt");
  const std::string vocab = readFile(fixture("clip_tokenizer_a") / "vocab.json");
  writeFile(tmp / "vocab.json", vocab.substr(0, 100));
  const std::string v = openError(tmp.path(), TokenizerKind::kClip);
  EXPECT_NE(v.find((tmp / "vocab.json").string()), std::string::npos) << v;
}

TEST(TokenizerErrors, UnknownModelTypeNamesFileAndKey) {
  test::TempDir tmp;
  nlohmann::json j = lmJson();
  j["model"]["type"] = "WordPiece";
  writeFile(tmp / "tokenizer.json", j.dump());
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find((tmp / "tokenizer.json").string()), std::string::npos) << e;
  EXPECT_NE(e.find("model.type"), std::string::npos) << e;
  EXPECT_NE(e.find("WordPiece"), std::string::npos) << e;
}

TEST(TokenizerErrors, UnsupportedStageNamesTheKey) {
  test::TempDir tmp;
  nlohmann::json j = lmJson();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKD"}}}}};
  writeFile(tmp / "tokenizer.json", j.dump());
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find("normalizer.normalizers[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("NFKD"), std::string::npos) << e;
}

TEST(TokenizerErrors, MergeOutsideTheVocabularyNamesTheMerge) {
  test::TempDir tmp;
  nlohmann::json j = lmJson();
  j["model"]["merges"].push_back({"zz", "qq"});
  writeFile(tmp / "tokenizer.json", j.dump());
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find("model.merges[" + std::to_string(j["model"]["merges"].size() - 1) + "]"), std::string::npos) << e;

  // merges.txt: the line number.
  test::TempDir clip;
  fs::copy_file(fixture("clip_tokenizer_a") / "vocab.json", clip / "vocab.json");
  writeFile(clip / "merges.txt", "#version: 0.2\na i\nthis line has three\n");
  const std::string m = openError(clip.path(), TokenizerKind::kClip);
  EXPECT_NE(m.find((clip / "merges.txt").string() + ":3"), std::string::npos) << m;
}

TEST(TokenizerErrors, NotASentencePieceModel) {
  test::TempDir tmp;
  writeFile(tmp / "spiece.model", "this is not a protobuf");
  const std::string e = openError(tmp.path(), TokenizerKind::kT5);
  EXPECT_NE(e.find((tmp / "spiece.model").string()), std::string::npos) << e;
  EXPECT_NE(e.find("not a sentencepiece model"), std::string::npos) << e;
}

TEST(TokenizerErrors, UnsupportedSplitRegexNamesFileKeyAndOffset) {
  // A Split pattern with a backreference, which Strata's regex engine refuses.
  test::TempDir tmp;
  nlohmann::json j = lmJson();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", R"(\p{L}+|(\p{N})\1)"}}}, {"behavior", "Isolated"}, {"invert", false}};
  writeFile(tmp / "tokenizer.json", j.dump());
  const std::string e = openError(tmp.path());
  EXPECT_NE(e.find((tmp / "tokenizer.json").string()), std::string::npos) << e;
  EXPECT_NE(e.find("pre_tokenizer.pattern.Regex"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 14"), std::string::npos) << e;
  EXPECT_NE(e.find("backreference"), std::string::npos) << e;
}
