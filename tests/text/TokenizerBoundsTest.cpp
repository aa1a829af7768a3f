// tokenizer.json under hostile shapes (issue 32, point 5): 30,000 nested
// pre-tokenizer Sequences crashed the recursive builder (SIGSEGV; 20,000 took
// 18 s), and a vocabulary id of 1e9 sized a 32 GB id -> token table (bad_alloc).
// Both must be a typed error naming the file and key, fast, in bounded memory:
// each runs in a forked child with a time and memory limit.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/Error.h"
#include "common/ForkedChild.h"
#include "common/TestSupport.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;
using namespace strata;
using test::ChildOutcome;

namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

nlohmann::json lmJson() {
  return nlohmann::json::parse(readFile(test::referenceDir() / "lm_tokenizer_a" / "tokenizer.json"));
}

// Opens the tokenizer folder in a child: at most 20 s and 1 GB more than the parent.
ChildOutcome openInChild(const fs::path& folder) {
  return test::runInChild([&] { return std::to_string(text::openTokenizer(folder).tokenizer->vocabSize()); }, 20.0);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(TokenizerBounds, DeeplyNestedPreTokenizersAreRefusedNamingTheFile) {
  test::TempDir tmp;
  // Written as text: building it as nlohmann::json and dumping would recurse too.
  const int depth = 30000;
  std::string nested;
  nested.reserve(depth * 60);
  for (int i = 0; i < depth; ++i) nested += R"({"type": "Sequence", "pretokenizers": [)";
  nested += R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})";
  for (int i = 0; i < depth; ++i) nested += "]}";
  std::string text = lmJson().dump();
  const std::string key = "\"pre_tokenizer\":";
  const std::size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  const std::size_t end = text.find('}', at) + 1;  // the fixture's flat ByteLevel object
  text.replace(at + key.size(), end - at - key.size(), nested);
  writeFile(tmp / "tokenizer.json", text);

  const ChildOutcome r = openInChild(tmp.path());
  ASSERT_EQ(r.kind, ChildOutcome::Kind::TypedError) << r.describe();
  EXPECT_TRUE(contains(r.text, (tmp / "tokenizer.json").string())) << r.text;
  EXPECT_TRUE(contains(r.text, "nested deeper than")) << r.text;
  EXPECT_LT(r.seconds, 5.0);
}

TEST(TokenizerBounds, HugeVocabularyIdIsRefusedNamingTheKey) {
  test::TempDir tmp;
  for (const char* where : {"vocab", "added_tokens"}) {
    nlohmann::json j = lmJson();
    if (std::string(where) == "vocab")
      j["model"]["vocab"]["zz-far"] = 1000000000;
    else
      j["added_tokens"][0]["id"] = 1000000000;
    writeFile(tmp / "tokenizer.json", j.dump());
    const ChildOutcome r = openInChild(tmp.path());
    ASSERT_EQ(r.kind, ChildOutcome::Kind::TypedError) << where << ": " << r.describe();
    EXPECT_TRUE(contains(r.text, (tmp / "tokenizer.json").string())) << r.text;
    EXPECT_TRUE(contains(r.text, where)) << r.text;
    EXPECT_TRUE(contains(r.text, "1000000000")) << r.text;
  }
  // An id past 2^32 is not read as a small one (it used to wrap to 0).
  nlohmann::json j = lmJson();
  j["model"]["vocab"]["zz-wrap"] = 4294967296ULL;
  writeFile(tmp / "tokenizer.json", j.dump());
  const ChildOutcome r = openInChild(tmp.path());
  ASSERT_EQ(r.kind, ChildOutcome::Kind::TypedError) << r.describe();
  EXPECT_TRUE(contains(r.text, "out of range")) << r.text;
}
