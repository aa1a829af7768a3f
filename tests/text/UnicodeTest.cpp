// The Unicode pieces the tokenizers lean on: NFC, lowercasing, classes, UTF-8.
#include <gtest/gtest.h>

#include "text/ByteLevel.h"
#include "text/Unicode.h"

using namespace strata::text;

TEST(Unicode, NfcComposesDecomposedAccentsAndHangul) {
  EXPECT_EQ(unicode::nfc(std::string("cafe\xCC\x81")), "caf\xC3\xA9");                           // e + U+0301 -> é
  EXPECT_EQ(unicode::nfc(std::string("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB")), "\xED\x95\x9C");  // 한 from jamo
  // Canonical order: dot below (220) goes before acute (230), then q stays uncomposed.
  EXPECT_EQ(unicode::nfc(std::u32string{U'q', 0x301, 0x323}), (std::u32string{U'q', 0x323, 0x301}));
  // Singleton decomposition: U+212B ANGSTROM SIGN -> U+00C5.
  EXPECT_EQ(unicode::nfc(std::u32string{0x212B}), std::u32string{0xC5});
  const std::string ascii = "plain ascii text";
  EXPECT_EQ(unicode::nfc(ascii), ascii);
}

TEST(Unicode, LowercaseAsPythonDoes) {
  EXPECT_EQ(unicode::toLower(std::string("\xC3\x80\xC3\x89 \xCE\xA3 ABC")), "\xC3\xA0\xC3\xA9 \xCF\x83 abc");
  // U+0130 lowercases to i + combining dot above (two code points).
  EXPECT_EQ(unicode::toLower(std::u32string{0x130}), (std::u32string{U'i', 0x307}));
}

TEST(Unicode, ClassesAndSpaces) {
  using unicode::CharClass;
  EXPECT_EQ(unicode::charClass(U'a'), CharClass::kLetter);
  EXPECT_EQ(unicode::charClass(0x4E2D), CharClass::kLetter);  // 中
  EXPECT_EQ(unicode::charClass(U'7'), CharClass::kNumber);
  EXPECT_EQ(unicode::charClass(0x2153), CharClass::kNumber);   // ⅓
  EXPECT_EQ(unicode::charClass(0x1F600), CharClass::kSymbol);  // 😀
  EXPECT_EQ(unicode::charClass(0x301), CharClass::kMark);
  EXPECT_EQ(unicode::charClass(0x7), CharClass::kOther);
  EXPECT_TRUE(unicode::isSpace(0x3000));
  EXPECT_TRUE(unicode::isSpace(0x2028));
  EXPECT_FALSE(unicode::isSpace(U'x'));
  EXPECT_TRUE(unicode::isCjk(0x65E5));
}

TEST(Unicode, Utf8RoundTripAndInvalidBytes) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
  EXPECT_EQ(unicode::encodeUtf8(unicode::decodeUtf8(s)), s);
  EXPECT_EQ(unicode::decodeUtf8("\xFF"
                                "a"),
            (std::u32string{0xFFFD, U'a'}));
  EXPECT_EQ(unicode::decodeUtf8("\xC0\xAF"), (std::u32string{0xFFFD, 0xFFFD}));  // overlong
}

TEST(ByteLevel, Gpt2ByteMap) {
  EXPECT_EQ(bytelevel::charOf(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(bytelevel::charOf('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(bytelevel::charOf('A'), "A");
  for (int b = 0; b < 256; ++b) {
    const auto cps = unicode::decodeUtf8(bytelevel::charOf(static_cast<unsigned char>(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(bytelevel::byteOf(cps[0]), std::optional<unsigned char>(static_cast<unsigned char>(b)));
  }
}

TEST(Unicode, GeneralCategoriesAndCaseFolding) {
  using unicode::Category;
  EXPECT_EQ(unicode::category(U'A'), Category::kLu);
  EXPECT_EQ(unicode::category(U'a'), Category::kLl);
  EXPECT_EQ(unicode::category(0x1C5), Category::kLt);  // ǅ
  EXPECT_EQ(unicode::category(0x2B0), Category::kLm);  // ʰ
  EXPECT_EQ(unicode::category(0x4E2D), Category::kLo);
  EXPECT_EQ(unicode::category(0x301), Category::kMn);
  EXPECT_EQ(unicode::category(0x661), Category::kNd);    // Arabic-Indic one
  EXPECT_EQ(unicode::category(0x216B), Category::kNl);   // Ⅻ
  EXPECT_EQ(unicode::category(0xBD), Category::kNo);     // ½
  EXPECT_EQ(unicode::category(0x1F600), Category::kSo);  // 😀, above the BMP table
  EXPECT_EQ(unicode::category(0x2029), Category::kZp);
  EXPECT_EQ(unicode::category(0xE000), Category::kCo);
  EXPECT_EQ(unicode::category(0x378), Category::kCn);  // unassigned
  EXPECT_EQ(unicode::category(0x110000), Category::kCn);
  // charClass follows the category.
  EXPECT_EQ(unicode::charClass(0x1C5), unicode::CharClass::kLetter);
  EXPECT_EQ(unicode::charClass(0x2029), unicode::CharClass::kLineSep);
  // Simple folding: one code point to one; ſ and the Kelvin sign join s and k.
  EXPECT_EQ(unicode::simpleFold(U'S'), U's');
  EXPECT_EQ(unicode::simpleFold(0x17F), U's');
  EXPECT_EQ(unicode::simpleFold(0x212A), U'k');
  EXPECT_EQ(unicode::simpleFold(0x1E9E), 0xDF);  // ẞ -> ß, not "ss"
  EXPECT_EQ(unicode::simpleFold(0x130), 0x130);  // İ has no simple fold
  EXPECT_EQ(unicode::caseVariants(U'k'), (std::u32string{U'K', U'k', 0x212A}));
  EXPECT_EQ(unicode::caseVariants(0x3C3), (std::u32string{0x3A3, 0x3C2, 0x3C3}));  // Σ ς σ
  EXPECT_EQ(unicode::caseVariants(U'1'), std::u32string{U'1'});
}
