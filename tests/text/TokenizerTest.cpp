// Tokenizers beyond the parity fixtures: the two forms of a FLUX.1 folder agree
// (vocab.json + merges.txt vs tokenizer.json for CLIP, spiece.model vs the
// Unigram tokenizer.json for T5), truncation is reported, Llama 2 style
// sentencepiece (bos, no eos, byte fallback), tokenizer.json features the fixture
// does not use (Split regex, ignore_merges, pair merges, Metaspace + byte
// fallback decoders), threads, and a speed line.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "io/Safetensors.h"
#include "text/ByteLevel.h"
#include "text/ClipTokenizer.h"
#include "text/HfTokenizer.h"
#include "text/ProtoWriter.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;
using namespace strata;
using text::TokenizerKind;

namespace {

fs::path pipelineDir() { return test::referenceDir() / "flux_pipeline_a" / "model"; }

std::vector<std::string> sampleTexts() {
  std::vector<std::string> texts = {"a photo of sks person wearing a red hat",
                                    "a small house near the river at night",
                                    "A Photo of the CAT, wearing a hat!",
                                    "  red   house near river  ",
                                    "zebra \xC3\xBCn\xC3\xAF"
                                    "code 123",
                                    "The River's  NIGHT-light... \xF0\x9F\x98\x80 caf\xC3\xA9",
                                    "cafe\xCC\x81 (decomposed)",
                                    "tabs\tand\nnewlines",
                                    ""};
  return texts;
}

void writeFile(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

}  // namespace

TEST(Tokenizer, FluxClipFolderFormsAgree) {
  const fs::path dir = pipelineDir() / "tokenizer";
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json")) << dir;
  const auto fromVocab = text::openTokenizer(dir);
  EXPECT_EQ(fromVocab.file.filename(), "vocab.json");
  EXPECT_EQ(fromVocab.modelMaxLength, std::optional<int>(16));
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "tokenizer_config.json"));
  text::SpecialTokenNames names{config["bos_token"].get<std::string>(), config["eos_token"].get<std::string>(),
                                config["pad_token"].get<std::string>(), config["unk_token"].get<std::string>()};
  const text::HfTokenizer fromJson(nlohmann::json::parse(std::ifstream(dir / "tokenizer.json")), dir / "tokenizer.json",
                                   names);
  for (const auto& t : sampleTexts()) {
    EXPECT_EQ(fromVocab.tokenizer->encode(t), fromJson.encode(t)) << t;
    EXPECT_EQ(fromVocab.tokenizer->encodeFixed(t, 16).ids, fromJson.encodeFixed(t, 16).ids) << t;
  }
}

TEST(Tokenizer, FluxT5FolderFormsAgree) {
  const fs::path dir = pipelineDir() / "tokenizer_2";
  const auto fromSpm = text::openTokenizer(dir);
  EXPECT_EQ(fromSpm.file.filename(), "spiece.model");
  // The same folder without spiece.model: the Unigram tokenizer.json.
  test::TempDir tmp;
  fs::copy_file(dir / "tokenizer.json", tmp / "tokenizer.json");
  fs::copy_file(dir / "tokenizer_config.json", tmp / "tokenizer_config.json");
  const auto fromJson = text::openTokenizer(tmp.path());
  EXPECT_EQ(fromJson.file.filename(), "tokenizer.json");
  EXPECT_EQ(fromSpm.tokenizer->vocabSize(), fromJson.tokenizer->vocabSize());
  auto texts = sampleTexts();
  texts.push_back("a </s> b <extra_id_3> c <pad>");
  for (const auto& t : texts) {
    EXPECT_EQ(fromSpm.tokenizer->encode(t), fromJson.tokenizer->encode(t)) << t;
    EXPECT_EQ(fromSpm.tokenizer->encodeFixed(t, 16).ids, fromJson.tokenizer->encodeFixed(t, 16).ids) << t;
  }
  const auto ids = fromSpm.tokenizer->encode("a photo of a red hat");
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(fromSpm.tokenizer->decode(ids, true), "a photo of a red hat");
  EXPECT_EQ(fromSpm.tokenizer->tokenToId("<extra_id_0>"), std::optional<int>(fromSpm.tokenizer->vocabSize() - 1));
}

TEST(Tokenizer, TruncationKeepsTheEndTokenAndReportsWhatWasCut) {
  const auto clip = text::openTokenizer(test::referenceDir() / "clip_tokenizer_a", TokenizerKind::kClip);
  const auto& tok = *clip.tokenizer;
  const auto full = tok.encode("a a a a a a a a a a");
  ASSERT_EQ(full.size(), 12u);
  const auto cut = tok.encodeFixed("a a a a a a a a a a", 8);
  EXPECT_EQ(cut.droppedTokens, 4);
  EXPECT_TRUE(cut.truncated());
  EXPECT_EQ(cut.ids.front(), *tok.specialTokenIds().bos);
  EXPECT_EQ(cut.ids.back(), *tok.specialTokenIds().eos);
  const auto fits = tok.encodeFixed("a a", 8);
  EXPECT_FALSE(fits.truncated());
  EXPECT_EQ(fits.length, 4);
  EXPECT_EQ(fits.mask, (std::vector<std::int64_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_THROW(tok.encodeFixed("a", 1), ConfigError);
  EXPECT_EQ(tok.decode(tok.encode("a photo of sks person"), true), "a photo of sks person");
}

TEST(Tokenizer, ClipCleansTextAsTheReference) {
  EXPECT_EQ(text::ClipTokenizer::cleanText("  A\tPhoto\x07 of\xE3\x80\x80THE  cat "), "a photo of the cat");
  EXPECT_EQ(text::ClipTokenizer::cleanText("\xE4\xB8\xAD\xE6\x96\x87x"), "\xE4\xB8\xAD \xE6\x96\x87 x");  // CJK spaced
  EXPECT_EQ(text::ClipTokenizer::cleanText("Cafe\xCC\x81"), "caf\xC3\xA9");
}

namespace {

// A Llama 2 style sentencepiece BPE model, built piece by piece: <unk> <s> </s>,
// the 256 byte pieces, then "▁hello" and the pieces that lead to it.
std::string llama2StyleModel() {
  text::ProtoWriter model;
  auto piece = [&](const std::string& s, float score, int type) {
    text::ProtoWriter p;
    p.bytesField(1, s);
    p.floatField(2, score);
    if (type != 1) p.intField(3, type);
    model.bytesField(1, p.str());
  };
  piece("<unk>", 0, 2);
  piece("<s>", 0, 3);
  piece("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    piece(name, 0, 6);
  }
  const std::string sp = "\xE2\x96\x81";
  const std::vector<std::string> pieces = {sp + "h", sp + "he", "ll", sp + "hell", sp + "hello",
                                           sp,       "h",       "e",  "l",         "o"};
  for (std::size_t i = 0; i < pieces.size(); ++i) piece(pieces[i], -static_cast<float>(i), 1);
  text::ProtoWriter trainer;
  trainer.intField(3, 2);  // BPE
  trainer.intField(4, 259 + static_cast<int>(pieces.size()));
  trainer.intField(35, 1);  // byte_fallback
  trainer.intField(40, 0);
  trainer.intField(41, 1);
  trainer.intField(42, 2);
  trainer.intField(43, -1);
  model.bytesField(2, trainer.str());
  text::ProtoWriter normalizer;
  normalizer.bytesField(1, "identity");
  normalizer.intField(3, 1);
  normalizer.intField(4, 0);
  normalizer.intField(5, 1);
  model.bytesField(3, normalizer.str());
  return model.str();
}

}  // namespace

TEST(Tokenizer, Llama2StyleSentencePieceBosNoEosByteFallback) {
  test::TempDir tmp;
  writeFile(tmp / "tokenizer.model", llama2StyleModel());
  const auto opened = text::openTokenizer(tmp.path());
  EXPECT_EQ(opened.file.filename(), "tokenizer.model");
  const auto& tok = *opened.tokenizer;
  const std::string textIn = "hello \xF0\x9F\x98\x80";
  const auto ids = tok.encode(textIn);
  std::vector<std::string> pieces;
  for (int id : ids) pieces.push_back(tok.idToToken(id).value_or("?"));
  // bos first, no eos; the emoji is not a piece: its four UTF-8 bytes.
  EXPECT_EQ(pieces, (std::vector<std::string>{"<s>", "\xE2\x96\x81hello", "\xE2\x96\x81", "<0xF0>", "<0x9F>", "<0x98>",
                                              "<0x80>"}));
  EXPECT_EQ(tok.decode(ids, true), textIn);
  EXPECT_EQ(tok.decode(ids, false), "<s>" + textIn);
  EXPECT_EQ(tok.encode("<s>hello", false).front(), 1);  // a control piece in the text is split out
  EXPECT_FALSE(tok.specialTokenIds().pad.has_value());
  EXPECT_THROW(tok.encodeFixed("hello", 8), ConfigError);  // padding needs a pad token

  writeFile(tmp / "tokenizer_config.json", R"({"add_bos_token": true, "add_eos_token": true, "pad_token": "</s>"})");
  const auto withEos = text::openTokenizer(tmp.path());
  EXPECT_EQ(withEos.tokenizer->encode("hello"), (std::vector<int>{1, 259 + 4, 2}));
  EXPECT_EQ(withEos.tokenizer->encodeFixed("hello", 5).ids, (std::vector<std::int64_t>{1, 263, 2, 2, 2}));
}

namespace {

// A byte-level vocabulary (the 256 characters) plus `extra` tokens.
nlohmann::json byteLevelVocab(const std::vector<std::string>& extra) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[text::bytelevel::charOf(static_cast<unsigned char>(b))] = b;
  int next = 256;
  for (const auto& t : extra) vocab[t] = next++;
  return vocab;
}

nlohmann::json llama3StyleJson(bool ignoreMerges) {
  // Llama 3's split pattern, ByteLevel without its own regex, "a b" string merges.
  nlohmann::json j;
  j["added_tokens"] = {{{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}, {"normalized", false}}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["model"] = {{"type", "BPE"},
                {"ignore_merges", ignoreMerges},
                // "hello" and "Ġworld" are in the vocabulary, but no merges build them.
                {"vocab", byteLevelVocab({"he", "hel", "hello", "\xC4\xA0w", "\xC4\xA0world", "12", "123"})},
                {"merges", {"h e", "he l", "1 2", "12 3", "\xC4\xA0 w"}}};
  nlohmann::json single = nlohmann::json::array();
  single.push_back({{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}});
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  nlohmann::json specials;
  specials["<|begin_of_text|>"] = {{"id", "<|begin_of_text|>"}, {"ids", {300}}, {"tokens", {"<|begin_of_text|>"}}};
  nlohmann::json template_ = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  nlohmann::json byteLevel = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  j["post_processor"] = {{"type", "Sequence"}, {"processors", {byteLevel, template_}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

}  // namespace

TEST(Tokenizer, TokenizerJsonSplitRegexAndIgnoreMerges) {
  const text::HfTokenizer plain(llama3StyleJson(false), "llama3.json");
  // \p{N}{1,3}: 12345 -> "123" "45"; "hello" is built from merges only as far as they go.
  EXPECT_EQ(plain.tokens("hello world 12345"),
            (std::vector<std::string>{"hel", "l", "o", "\xC4\xA0w", "o", "r", "l", "d", "\xC4\xA0", "123", "4", "5"}));
  const text::HfTokenizer ignoring(llama3StyleJson(true), "llama3.json");
  EXPECT_EQ(ignoring.tokens("hello world 12345"),
            (std::vector<std::string>{"hello", "\xC4\xA0world", "\xC4\xA0", "123", "4", "5"}));
  const auto ids = ignoring.encode("hello world");
  EXPECT_EQ(ids.front(), 300);
  EXPECT_EQ(ignoring.decode(ids, true), "hello world");
  EXPECT_EQ(ignoring.decode(ids, false), "<|begin_of_text|>hello world");
  EXPECT_EQ(ignoring.encode("<|begin_of_text|>hi", false).front(), 300);
}

TEST(Tokenizer, TokenizerJsonPossessivePatternCompiles) {
  // A cl100k/Tekken-style pattern with possessive quantifiers.
  nlohmann::json j = llama3StyleJson(false);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
  const text::HfTokenizer tok(j, "tekken.json");
  EXPECT_EQ(tok.tokens("it's 1234!!"),
            (std::vector<std::string>{"i", "t", "'", "s", "\xC4\xA0", "123", "4", "!", "!"}));
}

TEST(Tokenizer, TokenizerJsonLlama2StyleMetaspaceByteFallback) {
  // sentencepiece-converted BPE: Prepend + Replace normalizer, no pre-tokenizer,
  // byte fallback, pair-form merges, decoder Replace/ByteFallback/Fuse/Strip.
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::string sp = "\xE2\x96\x81";
  vocab[sp] = 259;
  vocab["a"] = 260;
  vocab["b"] = 261;
  vocab[sp + "a"] = 262;
  vocab["ab"] = 263;
  vocab[sp + "ab"] = 264;
  nlohmann::json j;
  j["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                       {{"id", 1}, {"content", "<s>"}, {"special", true}},
                       {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", sp}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}};
  j["pre_tokenizer"] = nullptr;
  j["model"] = {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", true},
                {"fuse_unk", true},
                {"vocab", vocab},
                {"merges", nlohmann::json::array({nlohmann::json::array({sp, "a"}), nlohmann::json::array({"a", "b"}),
                                                  nlohmann::json::array({sp + "a", "b"})})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const text::HfTokenizer tok(j, "llama2.json", {std::string("<s>"), std::string("</s>"), std::nullopt, std::nullopt});
  // "ab ab" -> "▁ab▁ab": ▁+a first (rank 0, leftmost), then ▁a+b.
  EXPECT_EQ(tok.encode("ab ab"), (std::vector<int>{1, 264, 264}));
  // é is not in the vocabulary: its two bytes.
  EXPECT_EQ(tok.encode("ab\xC3\xA9", false), (std::vector<int>{264, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.decode(tok.encode("ab ab\xC3\xA9"), true), "ab ab\xC3\xA9");
  EXPECT_EQ(tok.specialTokenIds().bos, std::optional<int>(1));
  EXPECT_EQ(tok.specialTokenIds().unk, std::optional<int>(0));
}

TEST(Tokenizer, ThreadsGiveTheSameIds) {
  const auto clip = text::openTokenizer(test::referenceDir() / "clip_tokenizer_a", TokenizerKind::kClip);
  const auto t5 = text::openTokenizer(test::referenceDir() / "t5_tokenizer_a", TokenizerKind::kT5);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back(sampleTexts()[static_cast<std::size_t>(i) % sampleTexts().size()] + " " + std::to_string(i));
  std::vector<std::vector<int>> serial;
  for (const auto& t : texts) serial.push_back(clip.tokenizer->encode(t)), serial.push_back(t5.tokenizer->encode(t));
  std::vector<std::vector<std::vector<int>>> parallel(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (const auto& t : texts)
        parallel[k].push_back(clip.tokenizer->encode(t)), parallel[k].push_back(t5.tokenizer->encode(t));
    });
  for (auto& th : threads) th.join();
  for (const auto& p : parallel) EXPECT_EQ(p, serial);
}

TEST(Tokenizer, EncodeSpeed) {
  // Not an assertion: a line for the log (caching encodes thousands of captions).
  std::vector<std::string> captions;
  const char* words[] = {"a",   "photo", "of",    "sks",   "person", "wearing",
                         "red", "hat",   "river", "night", "small",  "house"};
  for (int i = 0; i < 2000; ++i) {
    std::string c;
    for (int w = 0; w < 12; ++w) c += std::string(words[(i * 7 + w * 3) % 12]) + (w % 5 == 4 ? ", " : " ");
    captions.push_back(c + std::to_string(i));
  }
  auto time = [&](const char* name, const text::Tokenizer& tok) {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t n = 0;
    for (const auto& c : captions) n += tok.encodeFixed(c, 77).ids.size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[bench] " << name << ": " << captions.size() << " captions in " << ms << " ms ("
              << 1000.0 * ms / static_cast<double>(captions.size()) << " us each)" << std::endl;
    EXPECT_EQ(n, captions.size() * 77);
  };
  time("clip (vocab.json)",
       *text::openTokenizer(test::referenceDir() / "clip_tokenizer_a", TokenizerKind::kClip).tokenizer);
  time("t5 (spiece.model)",
       *text::openTokenizer(test::referenceDir() / "t5_tokenizer_a", TokenizerKind::kT5).tokenizer);
  // The lm fixture has a pad token; pad with it. Its GPT-2 split runs on Strata's regex engine.
  time("lm (tokenizer.json)", *text::openTokenizer(test::referenceDir() / "lm_tokenizer_a").tokenizer);
}

TEST(Tokenizer, FluxPipelinePromptsTruncateAsTheReference) {
  // The pipeline fixture lists which prompts its CLIP and T5 tokenizers cut.
  const fs::path root = test::referenceDir() / "flux_pipeline_a";
  const auto manifest = nlohmann::json::parse(std::ifstream(root / "manifest.json"));
  const auto prompts = manifest.at("prompts").get<std::vector<std::string>>();
  const auto clip = text::openTokenizer(root / "model" / "tokenizer");
  const auto t5 = text::openTokenizer(root / "model" / "tokenizer_2");
  const int clipLength = manifest.at("clip_max_length").get<int>();
  const int t5Length = manifest.at("max_sequence_length").get<int>();
  auto truncatedIndices = [&](const text::Tokenizer& tok, int length) {
    std::vector<int> out;
    for (std::size_t i = 0; i < prompts.size(); ++i)
      if (tok.encodeFixed(prompts[i], length).truncated()) out.push_back(static_cast<int>(i));
    return out;
  };
  EXPECT_EQ(truncatedIndices(*clip.tokenizer, clipLength),
            manifest.at("truncated_prompts").at("clip").get<std::vector<int>>());
  EXPECT_EQ(truncatedIndices(*t5.tokenizer, t5Length),
            manifest.at("truncated_prompts").at("t5").get<std::vector<int>>());
}

TEST(Tokenizer, Flux2PipelineTokenizersGiveTheReferenceIds) {
  // FLUX.2's text encoders' tokenizers (Mistral's Tekken for dev, Qwen3 for klein):
  // their tokenizer.json split patterns run on Strata's regex engine. The ids of
  // the templated prompts are in each flux2_pipeline fixture's outputs.
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(test::referenceDir())) {
    const fs::path manifestPath = entry.path() / "manifest.json";
    if (!fs::exists(manifestPath)) continue;
    const auto manifest = nlohmann::json::parse(std::ifstream(manifestPath));
    if (manifest.value("kind", "") != "flux2_pipeline") continue;
    SCOPED_TRACE(entry.path().string());
    const auto opened = text::openTokenizer(entry.path() / "model" / "tokenizer", TokenizerKind::kCausalLm);
    const at::Tensor ids = io::loadSafetensors(entry.path() / "outputs.safetensors").at("input_ids");
    const auto texts = manifest.at("templated_texts").get<std::vector<std::string>>();
    const auto counts = manifest.at("token_counts_before_padding").get<std::vector<std::int64_t>>();
    const bool leftPadded = manifest.at("padding_side").get<std::string>() == "left";
    const std::int64_t width = ids.size(1);
    ASSERT_EQ(static_cast<std::int64_t>(texts.size()), ids.size(0));
    for (std::size_t i = 0; i < texts.size(); ++i) {
      // The reference's real tokens: the last `count` of a left-padded row, else the first.
      const std::int64_t count = std::min(counts[i], width);
      const at::Tensor row = ids[static_cast<std::int64_t>(i)].narrow(0, leftPadded ? width - count : 0, count);
      const std::vector<std::int64_t> want(row.data_ptr<std::int64_t>(), row.data_ptr<std::int64_t>() + count);
      std::vector<int> got = opened.tokenizer->encode(texts[i]);
      if (static_cast<std::int64_t>(got.size()) > count) got.resize(static_cast<std::size_t>(count));  // truncated
      EXPECT_EQ(std::vector<std::int64_t>(got.begin(), got.end()), want) << "templated text " << i;
      ++checked;
    }
  }
  if (checked == 0)
    GTEST_SKIP() << "no flux2_pipeline fixture under " << test::referenceDir()
                 << " (STRATA_REFERENCE_DIR names a folder that has them)";
  std::cout << "[tokenizer] " << checked << " FLUX.2 templated prompts give the reference ids" << std::endl;
}
