#pragma once
// PCRE2 (UTF + UCP, JIT where it compiles) as the reference the tests hold
// Strata's own regex engine (core/text/Regex) against. Tests only: Strata itself
// does not link PCRE2. Built where CMake finds libpcre2-8 (STRATA_TEST_HAS_PCRE2).
#ifdef STRATA_TEST_HAS_PCRE2

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::test {

class Pcre2Regex {
 public:
  // `jit` false: PCRE2's interpreter without its auto-possessification, the plain
  // backtracking the patterns' semantics are defined by. (PCRE2 10.42's JIT and its
  // auto-possessification both get some rare constructs wrong, e.g. \s*(?>|,) ,
  // 1?(?>(?:|x)(?:|x))\d and (?>\d+|\B){2}; the tokenizer patterns are not among them.)
  explicit Pcre2Regex(const std::string& pattern, bool jit = true) {
    int errorCode = 0;
    PCRE2_SIZE errorOffset = 0;
    const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                  (jit ? 0u : static_cast<std::uint32_t>(PCRE2_NO_AUTO_POSSESS));
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &errorCode,
                          &errorOffset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(errorCode, message, sizeof message);
      throw std::runtime_error("PCRE2 does not compile \"" + pattern + "\" at " + std::to_string(errorOffset) + ": " +
                               reinterpret_cast<const char*>(message));
    }
    jit_ = jit && pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
    md_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre2Regex() {
    pcre2_match_data_free(md_);
    pcre2_code_free(code_);
  }
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // The same walk as text::Regex::findAll: leftmost matches, empty ones skipped
  // by one character.
  std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view text) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t offset = 0;
    while (offset <= text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), offset, 0, md_, nullptr)
                    : pcre2_match(code_, subject, text.size(), offset, 0, md_, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code_, subject, text.size(), offset, 0, md_, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw std::runtime_error("PCRE2 match failed: " + std::to_string(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
      const std::size_t begin = ov[0], end = ov[1];
      if (end > begin) {
        out.emplace_back(begin, end);
        offset = end;
        continue;
      }
      if (end >= text.size()) break;
      std::size_t next = end + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      offset = next;
    }
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* md_ = nullptr;
  bool jit_ = false;
};

}  // namespace strata::test

#endif
