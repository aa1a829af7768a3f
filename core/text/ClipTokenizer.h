#pragma once
// CLIP's tokenizer from vocab.json + merges.txt, as transformers' reference
// CLIPTokenizer runs it without ftfy: drop control characters, fold whitespace,
// space out CJK ideographs, NFC, lowercase, split with CLIP's pattern ('s 't ...,
// letter runs, single digits, other runs), byte-level map, BPE with "</w>" word
// ends. encode() puts <|startoftext|> first and <|endoftext|> last.
#include <memory>
#include <string>

#include "text/AddedTokens.h"
#include "text/BpeModel.h"
#include "text/Tokenizer.h"

namespace strata::text {

struct ClipTokenizerOptions {
  std::string bosToken = "<|startoftext|>";
  std::string eosToken = "<|endoftext|>";
  std::string padToken = "<|endoftext|>";  // FLUX.1 / SD 1.x; some CLIP-G folders use "!"
  std::string unkToken = "<|endoftext|>";
};

class ClipTokenizer : public Tokenizer {
 public:
  // Throws IoError naming the file (and line, for merges.txt) on missing or bad input.
  ClipTokenizer(const std::filesystem::path& vocabJson, const std::filesystem::path& mergesTxt,
                ClipTokenizerOptions options = {});

  std::vector<int> encodeBody(const std::string& text) const override;
  std::vector<int> addSpecialTokens(std::vector<int> body) const override;
  std::string decode(const std::vector<int>& ids, bool skipSpecialTokens = false) const override;
  int vocabSize() const override { return bpe_->vocabSize(); }
  std::optional<int> tokenToId(const std::string& token) const override { return bpe_->tokenToId(token); }
  std::optional<std::string> idToToken(int id) const override;
  SpecialTokenIds specialTokenIds() const override { return special_; }
  std::string description() const override;

  // The text as the reference cleans it before the split (exposed for tests).
  static std::string cleanText(const std::string& text);

 private:
  std::unique_ptr<BpeModel> bpe_;
  AddedTokens added_;
  SpecialTokenIds special_;
};

}  // namespace strata::text
