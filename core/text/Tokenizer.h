#pragma once
// The one tokenizer interface the rest of Strata uses (FLUX's text encoders, the
// causal-LM data path). Implementations: SentencePieceTokenizer (T5, Llama 2),
// ClipTokenizer (vocab.json + merges.txt), HfTokenizer (tokenizer.json).
// A tokenizer is loaded once and is safe to use from several threads.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace strata::text {

// A fixed-length encoding, as a text encoder takes it.
struct TokenizedText {
  std::vector<std::int64_t> ids;   // [maxLength]: specials included, padding last
  std::vector<std::int64_t> mask;  // [maxLength]: 1 for tokens, 0 for padding
  std::int64_t length = 0;         // tokens before padding (specials included)
  std::int64_t droppedTokens = 0;  // tokens cut by truncation (0: nothing cut)
  bool truncated() const { return droppedTokens > 0; }
};

struct SpecialTokenIds {
  std::optional<int> bos;
  std::optional<int> eos;
  std::optional<int> pad;
  std::optional<int> unk;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids of `text`; with addSpecialTokens, the tokenizer's own rule adds its
  // specials (T5: eos last; CLIP: start and end; tokenizer.json: its post-processor).
  std::vector<int> encode(const std::string& text, bool addSpecialTokens = true) const;

  // Truncates the body so that body + specials fit in maxLength (the specials stay),
  // then pads with the pad id to maxLength. Throws ConfigError when maxLength cannot
  // hold the specials, or when padding is needed and the tokenizer has no pad token.
  TokenizedText encodeFixed(const std::string& text, int maxLength) const;

  virtual std::string decode(const std::vector<int>& ids, bool skipSpecialTokens = false) const = 0;

  virtual int vocabSize() const = 0;
  virtual std::optional<int> tokenToId(const std::string& token) const = 0;
  virtual std::optional<std::string> idToToken(int id) const = 0;
  virtual SpecialTokenIds specialTokenIds() const = 0;

  // What it is, for logs and errors: "sentencepiece (spiece.model)", ...
  virtual std::string description() const = 0;
  const std::filesystem::path& source() const { return source_; }

  // Ids of the text alone, no specials added (added tokens in the text still count).
  virtual std::vector<int> encodeBody(const std::string& text) const = 0;
  // The body with this tokenizer's specials around it.
  virtual std::vector<int> addSpecialTokens(std::vector<int> body) const = 0;
  // How many ids addSpecialTokens adds.
  std::size_t specialTokenCount() const { return addSpecialTokens({}).size(); }

 protected:
  explicit Tokenizer(std::filesystem::path source) : source_(std::move(source)) {}

 private:
  std::filesystem::path source_;
};

}  // namespace strata::text
