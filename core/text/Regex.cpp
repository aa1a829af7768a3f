#include "text/Regex.h"

#include "common/Error.h"

#ifdef STRATA_HAS_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace strata::text {

#ifdef STRATA_HAS_PCRE2

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  int errorCode = 0;
  PCRE2_SIZE errorOffset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errorCode, &errorOffset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(errorCode, message, sizeof message);
    throw IoError(where + ": the regex pattern does not compile (at offset " + std::to_string(errorOffset) +
                  "): " + reinterpret_cast<const char*>(message));
  }
  // JIT is an optional speed-up; the interpreter gives the same matches.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!md) throw Error("regex: out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t offset = 0;
  while (offset <= text.size()) {
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), offset, 0, md, nullptr)
                        : pcre2_match(impl_->code, subject, text.size(), offset, 0, md, nullptr);
    // The JIT's default stack is small; very long runs fall back to the interpreter.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(impl_->code, subject, text.size(), offset, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw Error(std::string("regex match failed: ") + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t begin = ov[0], end = ov[1];
    if (end > begin) out.emplace_back(begin, end);
    if (end == begin) {
      // An empty match: step over one character so the search moves on.
      if (end >= text.size()) break;
      std::size_t next = end + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      offset = next;
    } else {
      offset = end;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

#else

struct Regex::Impl {};

Regex::Regex(const std::string& pattern, const std::string& where) {
  throw Error(where +
              ": this tokenizer needs a regex pattern, and Strata was built without PCRE2 "
              "(install libpcre2-dev and configure again)");
}

Regex::~Regex() = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view) const { return {}; }

#endif

}  // namespace strata::text
