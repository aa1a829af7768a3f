#pragma once
// The little Unicode the tokenizers need, without ICU: UTF-8 decoding and
// encoding, a character's class (letter, number, ...), lowercasing as Python's
// str.lower does, simple case folding, and NFC. Tables come from
// scripts/gen_unicode_tables.py.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text::unicode {

enum class CharClass : std::uint8_t {
  kLetter = 0,    // L*
  kNumber = 1,    // N*
  kSpaceSep = 2,  // Zs
  kOther = 3,     // C* (controls, format, unassigned, surrogates, private use)
  kMark = 4,      // M*
  kPunct = 5,     // P*
  kSymbol = 6,    // S*
  kLineSep = 7,   // Zl, Zp
};

// The Unicode general category, in the order the generator writes them.
// clang-format off
enum class Category : std::uint8_t {
  kLu, kLl, kLt, kLm, kLo,                 // letters
  kMn, kMc, kMe,                           // marks
  kNd, kNl, kNo,                           // numbers
  kPc, kPd, kPs, kPe, kPi, kPf, kPo,       // punctuation
  kSm, kSc, kSk, kSo,                      // symbols
  kZs, kZl, kZp,                           // separators
  kCc, kCf, kCs, kCo, kCn,                 // other (Cn: unassigned, and anything above U+10FFFF)
};
// clang-format on
constexpr int kCategoryCount = 30;

Category category(char32_t cp);
CharClass charClass(char32_t cp);
int combiningClass(char32_t cp);
// White_Space as Python's str.isspace sees it.
bool isSpace(char32_t cp);
// CJK ideographs as BERT-style basic tokenizers list them.
bool isCjk(char32_t cp);

// Decodes UTF-8; an invalid byte becomes U+FFFD (one per byte), as Python's
// errors="replace" does.
std::u32string decodeUtf8(std::string_view s);
void appendUtf8(std::string& out, char32_t cp);
std::string encodeUtf8(const std::u32string& s);
// Length in bytes of the UTF-8 sequence starting at s[i] (1 for invalid bytes).
std::size_t utf8Length(std::string_view s, std::size_t i);

// Simple case folding (one code point to one): two code points are equal without
// case when their folds are equal.
char32_t simpleFold(char32_t cp);
// Every code point whose simple fold equals cp's (cp included), in ascending order.
std::u32string caseVariants(char32_t cp);
// Every code point that has another case variant, in ascending order.
const std::u32string& casedCodePoints();

std::u32string toLower(const std::u32string& s);
std::string toLower(std::string_view utf8);
std::u32string nfc(const std::u32string& s);
std::string nfc(std::string_view utf8);

const char* tableVersion();

}  // namespace strata::text::unicode
