#pragma once
// Byte-pair encoding of one pre-tokenized word: start from its characters, apply
// the ranked merges (lowest rank first), map the symbols to ids. Shared by the
// CLIP tokenizer (vocab.json + merges.txt) and tokenizer.json's BPE model.
// Vocabulary and merges are loaded once; encoded words are cached.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::text {

struct BpeOptions {
  std::optional<std::string> unkToken;
  std::string continuingSubwordPrefix;  // put before every symbol but a word's first
  std::string endOfWordSuffix;          // put after a word's last symbol (CLIP: "</w>")
  bool fuseUnk = false;                 // consecutive unknown symbols become one unk
  bool byteFallback = false;            // unknown characters become <0xXX> byte tokens
  bool ignoreMerges = false;            // a word that is itself in the vocabulary is one token
};

struct BpeMerge {
  std::string left;
  std::string right;
  std::string where;  // for errors: "merges.txt:12", "tokenizer.json: model.merges[10]"
};

class BpeModel {
 public:
  // Throws IoError (with BpeMerge::where) when a merge names a token that is not
  // in the vocabulary, or when unkToken is set but not in it.
  BpeModel(std::unordered_map<std::string, int> vocab, const std::vector<BpeMerge>& merges, BpeOptions options,
           const std::string& source);

  // Appends the ids of `word` to `out`.
  void encodeWord(std::string_view word, std::vector<int>& out) const;

  std::optional<int> tokenToId(std::string_view token) const;
  // The token of `id`, or nullptr when the vocabulary has no such id.
  const std::string* idToToken(int id) const;
  int vocabSize() const { return static_cast<int>(idToToken_.size()); }
  const BpeOptions& options() const { return options_; }

 private:
  struct MergeTarget {
    int rank;
    int id;
  };
  std::vector<int> encodeUncached(std::string_view word) const;

  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> idToToken_;
  std::unordered_map<std::uint64_t, MergeTarget> merges_;
  BpeOptions options_;
  std::optional<int> unkId_;

  static constexpr std::size_t kCacheMaxWordBytes = 256;
  static constexpr std::size_t kCacheMaxEntries = 200000;
  mutable std::mutex cacheMutex_;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace strata::text
