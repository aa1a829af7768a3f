#pragma once
// A compiled PCRE2 pattern in UTF + UCP mode (\p{L}, \p{N}, \s as Unicode sees
// them; possessive quantifiers and lookahead work), as tokenizer.json patterns
// need. Without PCRE2 in the build, constructing one throws an Error that says so.
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

  // Every non-overlapping match in `text`, as [begin, end) byte offsets.
  std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::text
