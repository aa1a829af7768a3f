#include "text/AddedTokens.h"

#include <algorithm>

#include "text/Unicode.h"

namespace strata::text {
namespace {

bool isWordChar(char32_t cp) {
  if (cp == '_') return true;
  const auto c = unicode::charClass(cp);
  return c == unicode::CharClass::kLetter || c == unicode::CharClass::kNumber;
}

// The code point that ends just before byte `pos` (0 when pos is 0).
char32_t codePointBefore(const std::string& s, std::size_t pos) {
  if (pos == 0) return 0;
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const std::u32string cps = unicode::decodeUtf8(std::string_view(s).substr(start, pos - start));
  return cps.empty() ? 0 : cps.back();
}

char32_t codePointAt(const std::string& s, std::size_t pos) {
  if (pos >= s.size()) return 0;
  const std::u32string cps = unicode::decodeUtf8(std::string_view(s).substr(pos, unicode::utf8Length(s, pos)));
  return cps.empty() ? 0 : cps.front();
}

bool isAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

void AddedTokens::add(AddedToken token) {
  if (token.content.empty()) return;
  auto existing = byContent_.find(token.content);
  if (existing != byContent_.end()) {
    tokens_[existing->second] = std::move(token);
  } else {
    tokens_.push_back(std::move(token));
  }
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  byId_.clear();
  byContent_.clear();
  firstBytes_.fill(false);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    firstBytes_[static_cast<unsigned char>(tokens_[i].content[0])] = true;
    byId_[tokens_[i].id] = i;
    byContent_[tokens_[i].content] = i;
  }
}

std::vector<TextPiece> AddedTokens::split(const std::string& text, bool normalizedPass) const {
  std::vector<TextPiece> out;
  std::size_t plainStart = 0;  // start of the text not yet emitted
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!firstBytes_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* found = nullptr;
    for (const AddedToken& t : tokens_) {
      if (t.normalized != normalizedPass) continue;
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.singleWord &&
          (isWordChar(codePointBefore(text, pos)) || isWordChar(codePointAt(text, pos + t.content.size()))))
        continue;
      found = &t;
      break;  // longest first
    }
    if (!found) {
      pos += unicode::utf8Length(text, pos);
      continue;
    }
    std::size_t matchStart = pos;
    std::size_t matchEnd = pos + found->content.size();
    if (found->lstrip)
      while (matchStart > plainStart && isAsciiSpace(text[matchStart - 1])) --matchStart;
    if (found->rstrip)
      while (matchEnd < text.size() && isAsciiSpace(text[matchEnd])) ++matchEnd;
    if (matchStart > plainStart) out.push_back({text.substr(plainStart, matchStart - plainStart), -1});
    out.push_back({found->content, found->id});
    plainStart = pos = matchEnd;
  }
  if (plainStart < text.size()) out.push_back({text.substr(plainStart), -1});
  return out;
}

const AddedToken* AddedTokens::byId(int id) const {
  auto it = byId_.find(id);
  return it == byId_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedTokens::byContent(const std::string& content) const {
  auto it = byContent_.find(content);
  return it == byContent_.end() ? nullptr : &tokens_[it->second];
}

bool AddedTokens::isSpecial(int id) const {
  const AddedToken* t = byId(id);
  return t != nullptr && t->special;
}

int AddedTokens::maxId() const {
  int m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

}  // namespace strata::text
