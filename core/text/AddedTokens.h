#pragma once
// Added and special tokens ("<s>", "<|endoftext|>", "<extra_id_0>") are found in
// the text before anything else runs and become their own ids; only the text
// between them goes through normalizer, pre-tokenizer and model.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::text {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = false;
  bool lstrip = false;      // the match takes the whitespace before it
  bool rstrip = false;      // ... and after it
  bool singleWord = false;  // matches only as a whole word
  bool normalized = false;  // matched in the normalized text rather than the raw text
};

// A run of text, or one added token (id >= 0).
struct TextPiece {
  std::string text;
  int id = -1;
};

class AddedTokens {
 public:
  void add(AddedToken token);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` at the tokens whose `normalized` flag equals `normalizedPass`;
  // the longest token wins where several start at the same place.
  std::vector<TextPiece> split(const std::string& text, bool normalizedPass) const;

  const AddedToken* byId(int id) const;
  const AddedToken* byContent(const std::string& content) const;
  bool isSpecial(int id) const;
  int maxId() const;

 private:
  std::vector<AddedToken> tokens_;  // longest first
  std::unordered_map<int, std::size_t> byId_;
  std::unordered_map<std::string, std::size_t> byContent_;
  std::array<bool, 256> firstBytes_{};  // bytes some token starts with: a quick reject
};

}  // namespace strata::text
