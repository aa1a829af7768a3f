// The causal-LM dataset (families/llama/LmDataset): fields, the response marker,
// response-only labels, truncation, bad lines, packing, padding.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "families/llama/LmDataset.h"
#include "LmTestSupport.h"
#include "text/TokenizerFactory.h"

namespace strata {
namespace {

using families::collateLm;
using families::kIgnoreLabel;
using families::LmDataOptions;
using families::LmDataset;

class LmDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::writeCharTokenizer(dir_ / "tok", 128);
    tok_ = text::openTokenizer(dir_ / "tok", text::TokenizerKind::kCausalLm).tokenizer;
  }
  std::vector<int64_t> ids(const std::string& s) const {
    const auto v = tok_->encodeBody(s);
    return {v.begin(), v.end()};
  }
  test::TempDir dir_;
  std::unique_ptr<text::Tokenizer> tok_;
};

TEST_F(LmDatasetTest, PromptAndResponseFieldsGiveResponseOnlyLabels) {
  LmDataOptions o;
  o.promptField = "instruction";
  o.responseField = "output";
  const auto ds = LmDataset::fromJsonlText(R"({"instruction": "Hi", "output": "yo", "other": 3})", "t.jsonl", *tok_, o);
  ASSERT_EQ(ds.size(), 1u);
  const auto& s = ds.row(0);
  // <s> H i y o </s>
  const std::vector<int64_t> expectIds = {1, ids("H")[0], ids("i")[0], ids("y")[0], ids("o")[0], 2};
  EXPECT_EQ(s.ids, expectIds);
  const std::vector<int64_t> expectLabels = {kIgnoreLabel, kIgnoreLabel, kIgnoreLabel, expectIds[3], expectIds[4], 2};
  EXPECT_EQ(s.labels, expectLabels);
  EXPECT_EQ(ds.reports().front().responseTokens, 3);
}

TEST_F(LmDatasetTest, TextFieldSplitsAtTheResponseMarker) {
  LmDataOptions o;
  o.textField = "text";
  o.responseMarker = "### OUTPUT:";
  const auto ds = LmDataset::fromJsonlText(R"({"text": "### PROMPT: a ### OUTPUT: bc"})", "t.jsonl", *tok_, o);
  ASSERT_EQ(ds.size(), 1u);
  const auto& s = ds.row(0);
  const auto promptLen = static_cast<size_t>(1 + ids("### PROMPT: a ### OUTPUT:").size());
  ASSERT_EQ(s.ids.size(), promptLen + 3 + 1);  // " bc" + eos
  for (size_t i = 0; i < s.ids.size(); ++i) EXPECT_EQ(s.labels[i], i < promptLen ? kIgnoreLabel : s.ids[i]) << i;
}

TEST_F(LmDatasetTest, BadLinesAreSkippedCountedAndNamedByLine) {
  const std::string text =
      "{\"prompt\": \"a\", \"response\": \"b\"}\n"     // 1 ok
      "{not json\n"                                    // 2
      "\n"                                             // 3 blank
      "{\"prompt\": \"a\"}\n"                          // 4 missing response
      "{\"prompt\": \"a\", \"response\": \"\"}\n"      // 5 empty
      "[1, 2]\n"                                       // 6 not an object
      "{\"prompt\": 7, \"response\": \"b\"}\n"         // 7 not a string
      "{\"prompt\": \"c\", \"response\": \"d\"}\r\n";  // 8 ok (CRLF)
  const auto ds = LmDataset::fromJsonlText(text, "bad.jsonl", *tok_, {});
  EXPECT_EQ(ds.size(), 2u);
  const auto& r = ds.reports().front();
  EXPECT_EQ(r.lines, 8);
  ASSERT_EQ(r.skipped.size(), 6u);
  const std::vector<int64_t> lines = {2, 3, 4, 5, 6, 7};
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(r.skipped[i].line, lines[i]) << r.skipped[i].reason;
  EXPECT_NE(r.skipped[0].reason.find("not valid JSON"), std::string::npos);
  EXPECT_NE(r.skipped[1].reason.find("blank"), std::string::npos);
  EXPECT_NE(r.skipped[2].reason.find("no field 'response'"), std::string::npos);
  EXPECT_NE(r.skipped[3].reason.find("empty"), std::string::npos);
  EXPECT_NE(r.skipped[4].reason.find("not a JSON object"), std::string::npos);
  EXPECT_NE(r.skipped[5].reason.find("not a string"), std::string::npos);
  EXPECT_NE(r.summary().find("6 skipped"), std::string::npos) << r.summary();
}

TEST_F(LmDatasetTest, NoUsableLineIsAnErrorNamingTheFileAndLine) {
  try {
    (void)LmDataset::fromJsonlText("{\"prompt\": \"a\"}\n", "only.jsonl", *tok_, {});
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("only.jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)LmDataset::fromJsonl(dir_ / "missing.jsonl", *tok_, {}), IoError);
}

TEST_F(LmDatasetTest, TruncationIsCountedAndAPromptThatFillsTheLengthIsSkipped) {
  LmDataOptions o;
  o.maxSeqLen = 6;
  const std::string text =
      "{\"prompt\": \"ab\", \"response\": \"cdefgh\"}\n"   // 1 + 2 + 6 + 1 = 10 -> 6, 4 dropped
      "{\"prompt\": \"abcdefgh\", \"response\": \"x\"}\n"  // prompt alone fills it
      "{\"prompt\": \"a\", \"response\": \"b\"}\n";        // fits
  const auto ds = LmDataset::fromJsonlText(text, "t.jsonl", *tok_, o);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.row(0).ids.size(), 6u);
  const auto& r = ds.reports().front();
  EXPECT_EQ(r.truncated, 1);
  EXPECT_EQ(r.droppedTokens, 4);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0].line, 2);
  EXPECT_NE(r.skipped[0].reason.find("max_seq_len"), std::string::npos);
}

TEST_F(LmDatasetTest, PackingJoinsSamplesIntoRowsOfAtMostMaxSeqLen) {
  LmDataOptions o;
  o.maxSeqLen = 12;
  o.packing = true;
  std::string text;
  for (int i = 0; i < 5; ++i) text += "{\"prompt\": \"ab\", \"response\": \"cd\"}\n";  // 6 tokens each
  const auto ds = LmDataset::fromJsonlText(text, "t.jsonl", *tok_, o);
  ASSERT_EQ(ds.size(), 3u);  // 12, 12, 6
  EXPECT_EQ(ds.row(0).ids.size(), 12u);
  EXPECT_EQ(ds.row(2).ids.size(), 6u);
  EXPECT_EQ(ds.row(0).ids[6], 1);                // the second sample starts with <s>
  EXPECT_EQ(ds.row(0).labels[6], kIgnoreLabel);  // and its prompt has no loss
  EXPECT_EQ(ds.reports().front().rows, 3);
  EXPECT_EQ(ds.reports().front().samples, 5);
}

TEST_F(LmDatasetTest, CollatePadsLeftOrRightWithTheMask) {
  const auto ds = LmDataset::fromJsonlText(
      "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"abc\", \"response\": \"de\"}\n", "t.jsonl", *tok_, {});
  const std::vector<const families::LmSample*> rows = {&ds.row(0), &ds.row(1)};
  const int64_t pad = 0;
  for (auto side : {config::PaddingSide::Right, config::PaddingSide::Left}) {
    const auto b = collateLm(rows, pad, side);
    ASSERT_EQ(b.inputIds.sizes(), (std::vector<int64_t>{2, 7}));
    const auto n0 = static_cast<int64_t>(ds.row(0).ids.size());  // 4
    const int64_t start = side == config::PaddingSide::Left ? 7 - n0 : 0;
    for (int64_t t = 0; t < 7; ++t) {
      const bool in = t >= start && t < start + n0;
      EXPECT_EQ(b.attentionMask[0][t].item<int64_t>(), in ? 1 : 0) << t;
      EXPECT_EQ(b.inputIds[0][t].item<int64_t>(), in ? ds.row(0).ids[static_cast<size_t>(t - start)] : pad);
      EXPECT_EQ(b.labels[0][t].item<int64_t>(), in ? ds.row(0).labels[static_cast<size_t>(t - start)] : kIgnoreLabel);
    }
    EXPECT_EQ(b.attentionMask[1].sum().item<int64_t>(), 7);
    EXPECT_EQ(b.lossTokens, 2 + 3);  // "b" + eos, "de" + eos
  }
}

// A minimum length (train.cuda_graph: every batch the dataset's longest row long) pads
// further, with no mask and no loss on the padding; a shorter minimum changes nothing.
TEST_F(LmDatasetTest, CollatePadsToAMinimumLength) {
  const auto ds = LmDataset::fromJsonlText(
      "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"abc\", \"response\": \"de\"}\n", "t.jsonl", *tok_, {});
  const std::vector<const families::LmSample*> rows = {&ds.row(0), &ds.row(1)};
  const auto plain = collateLm(rows, 0, config::PaddingSide::Right);
  const auto longer = collateLm(rows, 0, config::PaddingSide::Right, 12);
  ASSERT_EQ(longer.inputIds.sizes(), (std::vector<int64_t>{2, 12}));
  EXPECT_TRUE(longer.inputIds.narrow(1, 0, 7).equal(plain.inputIds));
  EXPECT_TRUE(longer.labels.narrow(1, 0, 7).equal(plain.labels));
  EXPECT_EQ(longer.attentionMask.narrow(1, 7, 5).sum().item<int64_t>(), 0);
  EXPECT_EQ(longer.labels.narrow(1, 7, 5).ne(kIgnoreLabel).sum().item<int64_t>(), 0);
  EXPECT_EQ(longer.lossTokens, plain.lossTokens);
  EXPECT_EQ(collateLm(rows, 0, config::PaddingSide::Right, 3).inputIds.sizes(), plain.inputIds.sizes());
}

// The reader the app's preview uses is the one the dataset is built from: the
// same split, the same reasons, in line order, and it stops when asked.
TEST_F(LmDatasetTest, TheTextReaderSplitsAndSkipsAsTheDatasetDoes) {
  LmDataOptions o;
  o.textField = "text";
  o.responseMarker = "### OUTPUT:";
  const std::string text =
      "{\"text\": \"Q: a ### OUTPUT: b\"}\n"
      "{\"text\": \"no marker\"}\n"
      "\n"
      "{\"text\": \"Q: c ### OUTPUT: d\"}\n";
  std::vector<families::LmTextRecord> recs;
  const int64_t lines = families::readJsonlRecords(text, o, [&](const families::LmTextRecord& r) {
    recs.push_back(r);
    return true;
  });
  EXPECT_EQ(lines, 4);
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].line, 1);
  EXPECT_EQ(recs[0].prompt, "Q: a ### OUTPUT:");
  EXPECT_EQ(recs[0].response, " b");
  EXPECT_EQ(recs[0].skipReason, "");
  EXPECT_EQ(recs[1].skipReason, "field 'text' has no response marker '### OUTPUT:'");
  EXPECT_EQ(recs[2].skipReason, "blank line");
  EXPECT_EQ(recs[3].response, " d");
  // The dataset skips exactly the lines the reader gives a reason for.
  const auto ds = LmDataset::fromJsonlText(text, "t.jsonl", *tok_, o);
  const auto& skipped = ds.reports().at(0).skipped;
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].line, 2);
  EXPECT_EQ(skipped[0].reason, recs[1].skipReason);
  EXPECT_EQ(skipped[1].line, 3);
  EXPECT_EQ(ds.size(), 2u);
  // Stopping after the first line reads no further.
  int64_t seen = 0;
  EXPECT_EQ(families::readJsonlRecords(text, o, [&](const families::LmTextRecord&) { return ++seen < 1; }), 1);
  EXPECT_EQ(seen, 1);
}

// A dataset that names no fields of its own reads the common layouts; one that
// names its fields reads those only; a line with none says which fields it has.
TEST_F(LmDatasetTest, TheCommonLayoutsAreReadAndAnUnknownOneNamesItsFields) {
  const std::string text =
      "{\"prompt\": \"P\", \"completion\": \"C\"}\n"                     // 1
      "{\"instruction\": \"I\", \"input\": \"X\", \"output\": \"O\"}\n"  // 2
      "{\"instruction\": \"I\", \"input\": \"\", \"output\": \"O\"}\n"   // 3
      "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}, "
      "{\"role\": \"assistant\", \"content\": \"A\"}]}\n"                   // 4
      "{\"messages\": [{\"role\": \"user\", \"content\": \"U\"}]}\n"        // 5: no assistant turn
      "{\"question\": \"Q\", \"answer\": \"A\"}\n"                          // 6: unknown layout
      "{\"prompt\": \"P\", \"response\": \"R\", \"completion\": \"C\"}\n";  // 7: the configured fields win
  std::vector<families::LmTextRecord> recs;
  families::readJsonlRecords(text, {}, [&](const families::LmTextRecord& r) {
    recs.push_back(r);
    return true;
  });
  ASSERT_EQ(recs.size(), 7u);
  EXPECT_EQ(recs[0].layout, "prompt/completion");
  EXPECT_EQ(recs[0].prompt, "P");
  EXPECT_EQ(recs[0].response, "C");
  EXPECT_EQ(recs[1].layout, "instruction/input/output");
  EXPECT_EQ(recs[1].prompt, "I\n\nX\n\n");
  EXPECT_EQ(recs[1].response, "O");
  EXPECT_EQ(recs[2].prompt, "I\n\n");
  EXPECT_EQ(recs[3].layout, "messages");
  EXPECT_EQ(recs[3].prompt, "system: S\nuser: U\nassistant: ");
  EXPECT_EQ(recs[3].response, "A");
  EXPECT_NE(recs[4].skipReason.find("no assistant turn"), std::string::npos) << recs[4].skipReason;
  EXPECT_NE(recs[5].skipReason.find("the line has: question, answer"), std::string::npos) << recs[5].skipReason;
  EXPECT_NE(recs[5].skipReason.find("prompt/completion"), std::string::npos) << recs[5].skipReason;
  EXPECT_EQ(recs[6].layout, "prompt/response");
  EXPECT_EQ(recs[6].response, "R");
  for (int i : {0, 1, 2, 3, 6}) EXPECT_EQ(recs[size_t(i)].skipReason, "") << i;
  // The dataset trains on the same lines.
  EXPECT_EQ(LmDataset::fromJsonlText(text, "t.jsonl", *tok_, {}).size(), 5u);

  // Fields of its own: read as named, the common layouts are not guessed.
  LmDataOptions named;
  named.promptField = "question";
  named.responseField = "reply";
  recs.clear();
  families::readJsonlRecords("{\"prompt\": \"P\", \"completion\": \"C\"}\n{\"question\": \"Q\", \"reply\": \"R\"}\n",
                             named, [&](const families::LmTextRecord& r) {
                               recs.push_back(r);
                               return true;
                             });
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_NE(recs[0].skipReason.find("no field 'question' (the line has: prompt, completion)"), std::string::npos)
      << recs[0].skipReason;
  EXPECT_EQ(recs[1].response, "R");
}

TEST(LmDatasetSynthetic, SeededRowsOfTheLengthWithinTheVocab) {
  const auto a = LmDataset::synthetic(3, 16, 50, 7);
  const auto b = LmDataset::synthetic(3, 16, 50, 7);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.row(i).ids, b.row(i).ids);
    EXPECT_EQ(a.row(i).ids.size(), 16u);
    for (auto id : a.row(i).ids) EXPECT_TRUE(id >= 0 && id < 50);
  }
  EXPECT_NE(a.row(0).ids, a.row(1).ids);
}

}  // namespace
}  // namespace strata
