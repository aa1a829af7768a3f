#pragma once
// A sentencepiece model (spiece.model, tokenizer.model) through libsentencepiece
// (loaded as a module, see SentencePieceBackend.h),
// with the rule of the family that uses it:
//   T5:      ids, then eos ("</s>", 1); pad "<pad>" (0); <extra_id_N> tokens above
//            the model's pieces, as transformers' T5Tokenizer numbers them.
//   Llama 2: bos ("<s>") first, no eos by default; byte fallback is the model's own.
// Control pieces (and <extra_id_N>) in the text are split out first and become
// their own ids, as transformers does.
#include <memory>
#include <string>

#include "text/AddedTokens.h"
#include "text/SentencePieceBackend.h"
#include "text/Tokenizer.h"

namespace strata::text {

struct SentencePieceRule {
  bool addBos = false;
  bool addEos = true;
  int extraIds = 0;                     // T5: 100
  std::optional<std::string> padToken;  // a piece name; unset: the model's pad id, if any

  static SentencePieceRule t5() { return {false, true, 100, std::string("<pad>")}; }
  static SentencePieceRule llama() { return {true, false, 0, std::nullopt}; }
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Throws IoError naming the file when it is missing or not a sentencepiece model.
  SentencePieceTokenizer(const std::filesystem::path& model, SentencePieceRule rule);
  // A model given as serialized ModelProto bytes (built from a tokenizer.json Unigram).
  SentencePieceTokenizer(const std::string& serializedProto, const std::filesystem::path& source,
                         SentencePieceRule rule);
  ~SentencePieceTokenizer() override;

  std::vector<int> encodeBody(const std::string& text) const override;
  std::vector<int> addSpecialTokens(std::vector<int> body) const override;
  std::string decode(const std::vector<int>& ids, bool skipSpecialTokens = false) const override;
  int vocabSize() const override;
  std::optional<int> tokenToId(const std::string& token) const override;
  std::optional<std::string> idToToken(int id) const override;
  SpecialTokenIds specialTokenIds() const override { return special_; }
  std::string description() const override;

  // The pieces of `text` (no specials), for tests and debugging.
  std::vector<std::string> pieces(const std::string& text) const;

 private:
  void setUp();

  std::unique_ptr<SentencePieceBackend> sp_;
  SentencePieceRule rule_;
  AddedTokens added_;
  SpecialTokenIds special_;
  int pieceCount_ = 0;
};

}  // namespace strata::text
