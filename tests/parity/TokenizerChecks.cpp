// Parity of Strata's tokenizers with the reference fixtures of kinds
// "t5_tokenizer" (sentencepiece + T5's eos/pad rule), "clip_tokenizer" (CLIP BPE,
// start/end, truncation, padding) and "lm_tokenizer" (a tokenizer.json BPE: ids
// with and without specials, tokens, decodes). Every case of the manifest is
// checked; max_length comes from the manifest.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "common/Error.h"
#include "parity/ParityRegistry.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

std::vector<int> idsOf(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

std::vector<int> asInt(const std::vector<std::int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

const nlohmann::json& casesOf(const nlohmann::json& manifest) {
  const auto& cases = manifest.at("cases");
  EXPECT_FALSE(cases.empty()) << "manifest has no cases";
  return cases;
}

// Fixed-length ids (T5 and CLIP): encodeFixed(text, max_length) equals the reference.
void checkFixedLength(const fs::path& dir, const nlohmann::json& manifest, text::TokenizerKind kind) {
  const auto opened = text::openTokenizer(dir, kind);
  const int maxLength = manifest.at("max_length").get<int>();
  for (const auto& c : casesOf(manifest)) {
    const std::string textIn = c.at("text").get<std::string>();
    const auto expected = idsOf(c.at("ids"));
    const auto got = opened.tokenizer->encodeFixed(textIn, maxLength);
    EXPECT_EQ(asInt(got.ids), expected) << "text: \"" << textIn << "\"";
    // The mask covers the tokens up to the padding.
    ASSERT_EQ(got.mask.size(), got.ids.size());
    for (std::size_t i = 0; i < got.mask.size(); ++i)
      EXPECT_EQ(got.mask[i], static_cast<std::int64_t>(i) < got.length ? 1 : 0)
          << "text: \"" << textIn << "\" at " << i;
  }
}

void checkLmTokenizer(const fs::path& dir, const nlohmann::json& manifest) {
  const text::OpenedTokenizer opened = text::openTokenizer(dir, text::TokenizerKind::kCausalLm);
  const text::Tokenizer& tok = *opened.tokenizer;
  if (manifest.contains("vocab_size")) EXPECT_EQ(tok.vocabSize(), manifest.at("vocab_size").get<int>());
  if (manifest.contains("special_tokens"))
    for (auto it = manifest.at("special_tokens").begin(); it != manifest.at("special_tokens").end(); ++it)
      EXPECT_EQ(tok.tokenToId(it.key()), std::optional<int>(it.value().get<int>())) << it.key();
  for (const auto& c : casesOf(manifest)) {
    const std::string textIn = c.at("text").get<std::string>();
    SCOPED_TRACE("text: \"" + textIn + "\"");
    const auto ids = idsOf(c.at("ids"));
    const auto idsNoSpecial = idsOf(c.at("ids_no_special"));
    EXPECT_EQ(tok.encode(textIn, true), ids);
    EXPECT_EQ(tok.encode(textIn, false), idsNoSpecial);
    if (c.contains("tokens_no_special")) {
      std::vector<std::string> tokens;
      for (int id : idsNoSpecial) tokens.push_back(tok.idToToken(id).value_or("<no token>"));
      EXPECT_EQ(tokens, c.at("tokens_no_special").get<std::vector<std::string>>());
    }
    if (c.contains("decode")) EXPECT_EQ(tok.decode(ids, false), c.at("decode").get<std::string>());
    if (c.contains("decode_skip_special"))
      EXPECT_EQ(tok.decode(ids, true), c.at("decode_skip_special").get<std::string>());
    if (c.contains("decode_no_special"))
      EXPECT_EQ(tok.decode(idsNoSpecial, false), c.at("decode_no_special").get<std::string>());
  }
}

STRATA_PARITY_CHECK("t5_tokenizer", "sentencepiece ids + T5 rule (eos, pad, max_length) for every case",
                    [](const fs::path& dir, const nlohmann::json& m) {
                      checkFixedLength(dir, m, text::TokenizerKind::kT5);
                    });
STRATA_PARITY_CHECK("clip_tokenizer", "CLIP BPE ids (start/end, truncation, padding) for every case",
                    [](const fs::path& dir, const nlohmann::json& m) {
                      checkFixedLength(dir, m, text::TokenizerKind::kClip);
                    });
STRATA_PARITY_CHECK("lm_tokenizer", "tokenizer.json BPE: ids with/without specials, tokens, decodes", checkLmTokenizer);

}  // namespace
