#pragma once
// A Hugging Face tokenizer.json with a BPE model, run the way the tokenizers
// library runs it, from what the file says: added tokens split out first (raw
// text, then the normalized text for "normalized" ones), normalizer, pre-tokenizer
// (Split with regex patterns, ByteLevel, Metaspace, ...), BPE (merges as "a b" or
// ["a", "b"], ignore_merges, byte_fallback), post-processor, decoder. Llama 3,
// Qwen2, Mistral (Tekken-style), GPT-2 and CLIP files are this form.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "text/AddedTokens.h"
#include "text/BpeModel.h"
#include "text/HfComponents.h"
#include "text/Tokenizer.h"

namespace strata::text {

// Names of the special tokens (from tokenizer_config.json); unset ones are left
// out, except pad (tokenizer.json's padding.pad_id) and unk (model.unk_token).
struct SpecialTokenNames {
  std::optional<std::string> bos, eos, pad, unk;
};

class HfTokenizer : public Tokenizer {
 public:
  // `json` is the parsed file; `path` names it in errors. Throws IoError naming
  // the file and key for anything malformed or not supported.
  HfTokenizer(const nlohmann::json& json, const std::filesystem::path& path, const SpecialTokenNames& names = {});

  std::vector<int> encodeBody(const std::string& text) const override;
  std::vector<int> addSpecialTokens(std::vector<int> body) const override;
  std::string decode(const std::vector<int>& ids, bool skipSpecialTokens = false) const override;
  int vocabSize() const override;
  std::optional<int> tokenToId(const std::string& token) const override;
  std::optional<std::string> idToToken(int id) const override;
  SpecialTokenIds specialTokenIds() const override { return special_; }
  std::string description() const override;

  // The token strings of `text` (no specials), as tokenizers' tokenize() gives them.
  std::vector<std::string> tokens(const std::string& text) const;

 private:
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> preTokenizer_;
  std::unique_ptr<hf::PostProcessor> postProcessor_;
  std::unique_ptr<hf::Decoder> decoder_;
  AddedTokens added_;
  SpecialTokenIds special_;
};

// Reads the added_tokens array of a tokenizer.json.
AddedTokens readAddedTokens(const nlohmann::json& json, const std::string& where);

}  // namespace strata::text
