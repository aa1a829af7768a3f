#pragma once
// Strata's own regex engine for the split patterns of tokenizer.json files: a
// backtracking matcher with Perl/PCRE2 semantics (ordered alternation; greedy,
// lazy and possessive quantifiers; lookahead; atomic groups) on UTF-8 code
// points, where \s, \d, \w and \p{..} follow Unicode as PCRE2's UTF + UCP mode
// does. No library needed, so every build reads these files.
//
// Syntax: literals and escapes (\t \n \r \f \e \a \0dd \o{..} \x.. \x{..} \Q..\E),
// . \s \S \d \D \w \W \h \H \v \V, \p{..} \P{..} \pL \p{^L} with the general
// categories (L Lu Ll Lt Lm Lo L& M Mn Mc Me N Nd Nl No P.. S.. Z.. C.. Any),
// classes [..] [^..] with ranges and the escapes above, groups ( ) (?: )
// (?<name> ) (?>  ), flags (?i) (?m) (?s) (?-i) (?i: ), lookahead (?= ) (?! ),
// quantifiers ? * + {n} {n,} {n,m} with lazy ? and possessive + suffixes,
// anchors ^ $ \A \z \Z \b \B. Anything else (backreferences, lookbehind,
// recursion, scripts as properties, verbs) is refused when the pattern is
// compiled, with `where` and the offset in the message.
//
// Bounds: a pattern of at most 16 KiB that compiles to at most 65536
// instructions; matching stops with an Error once it has taken more steps than
// a budget that grows with the text (a pattern that backtracks exponentially
// cannot hang a tokenizer).
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::text {

class Regex {
 public:
  // `where` names the file and key the pattern came from, for errors.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in `text`, leftmost first, as [begin, end) byte
  // offsets; empty matches are not listed (the search steps one character past
  // them). Bytes that are not valid UTF-8 match nothing.
  std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view text) const;

  // The steps matching may take on a text of `bytes` bytes before it gives up.
  static std::size_t stepBudget(std::size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::text
