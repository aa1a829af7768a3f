#include "text/BpeModel.h"

#include <cstdio>
#include <limits>

#include "common/Error.h"
#include "text/JsonFile.h"
#include "text/Unicode.h"

namespace strata::text {
namespace {

std::uint64_t pairKey(int a, int b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int> vocab, const std::vector<BpeMerge>& merges, BpeOptions options,
                   const std::string& source)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int maxId = -1;
  for (const auto& [token, id] : vocab_) {
    if (id < 0) throw IoError(source + ": token \"" + token + "\" has a negative id " + std::to_string(id));
    if (id > kMaxTokenId)
      throw IoError(source + ": token \"" + token + "\" has the id " + std::to_string(id) + ", more than " +
                    std::to_string(kMaxTokenId) + " (no vocabulary is that large)");
    maxId = std::max(maxId, id);
  }
  idToToken_.resize(static_cast<std::size_t>(maxId + 1));
  for (const auto& [token, id] : vocab_) idToToken_[static_cast<std::size_t>(id)] = token;

  const std::size_t prefixLength = options_.continuingSubwordPrefix.size();
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& m = merges[rank];
    auto a = vocab_.find(m.left);
    auto b = vocab_.find(m.right);
    if (a == vocab_.end() || b == vocab_.end()) {
      throw IoError(m.where + ": merge \"" + m.left + " " + m.right + "\" names \"" +
                    (a == vocab_.end() ? m.left : m.right) + "\", which is not in the vocabulary");
    }
    // The right part loses its continuation prefix when it joins the left one.
    std::string joined = m.left;
    if (prefixLength > 0 && m.right.compare(0, prefixLength, options_.continuingSubwordPrefix) == 0)
      joined += m.right.substr(prefixLength);
    else
      joined += m.right;
    auto j = vocab_.find(joined);
    if (j == vocab_.end())
      throw IoError(m.where + ": merge \"" + m.left + " " + m.right + "\" makes \"" + joined +
                    "\", which is not in the vocabulary");
    // The first occurrence of a pair keeps its rank, as the reference loaders do.
    merges_.emplace(pairKey(a->second, b->second), MergeTarget{static_cast<int>(rank), j->second});
  }
  if (options_.unkToken) {
    auto it = vocab_.find(*options_.unkToken);
    if (it == vocab_.end())
      throw IoError(source + ": the unknown token \"" + *options_.unkToken + "\" is not in the vocabulary");
    unkId_ = it->second;
  }
}

std::optional<int> BpeModel::tokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::idToToken(int id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= idToToken_.size()) return nullptr;
  const std::string& t = idToToken_[static_cast<std::size_t>(id)];
  // A hole in the ids (vocab ids need not be dense) has no token.
  if (t.empty()) return nullptr;
  return &t;
}

void BpeModel::encodeWord(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids = encodeUncached(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cacheMutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

std::vector<int> BpeModel::encodeUncached(std::string_view word) const {
  if (options_.ignoreMerges) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) return {it->second};
  }
  // Initial symbols: one per character; -1 marks an unknown symbol.
  std::vector<int> symbols;
  std::vector<bool> unknown;
  std::size_t start = 0;
  while (start < word.size()) {
    const std::size_t n = unicode::utf8Length(word, start);
    std::string symbol(word.substr(start, n));
    const bool first = start == 0;
    const bool last = start + n >= word.size();
    if (!first) symbol = options_.continuingSubwordPrefix + symbol;
    if (last) symbol += options_.endOfWordSuffix;
    auto it = vocab_.find(symbol);
    if (it != vocab_.end()) {
      symbols.push_back(it->second);
      unknown.push_back(false);
    } else {
      bool handled = false;
      if (options_.byteFallback) {
        std::vector<int> byteIds;
        for (std::size_t k = 0; k < n; ++k) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(word[start + k]));
          auto b = vocab_.find(name);
          if (b == vocab_.end()) break;
          byteIds.push_back(b->second);
        }
        if (byteIds.size() == n) {
          for (int id : byteIds) {
            symbols.push_back(id);
            unknown.push_back(false);
          }
          handled = true;
        }
      }
      if (!handled && unkId_) {
        if (!(options_.fuseUnk && !unknown.empty() && unknown.back())) {
          symbols.push_back(*unkId_);
          unknown.push_back(true);
        }
      }
      // Without an unknown token the character is dropped, as the reference does.
    }
    start += n;
  }

  // Apply the lowest-ranked merge until none applies; ties go to the leftmost pair.
  while (symbols.size() > 1) {
    int bestRank = std::numeric_limits<int>::max();
    std::size_t bestPos = 0;
    int bestId = -1;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      if (unknown[i] || unknown[i + 1]) continue;
      auto it = merges_.find(pairKey(symbols[i], symbols[i + 1]));
      if (it != merges_.end() && it->second.rank < bestRank) {
        bestRank = it->second.rank;
        bestPos = i;
        bestId = it->second.id;
      }
    }
    if (bestId < 0) break;
    symbols[bestPos] = bestId;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(bestPos) + 1);
    unknown.erase(unknown.begin() + static_cast<std::ptrdiff_t>(bestPos) + 1);
  }
  return symbols;
}

}  // namespace strata::text
