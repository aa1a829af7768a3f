// Strata's regex engine against PCRE2 (UTF + UCP), the engine whose semantics it
// follows: the tokenizer patterns over many texts (fixed ones and random ones from
// a fixed seed), every code point through every class, case-insensitive matching
// of every cased code point, a set of patterns for the rest of the syntax, and a
// speed line on 1 MB of mixed text. Skips where PCRE2 is not installed
// (Strata itself does not need it).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <memory>

#include "Pcre2Reference.h"
#include "common/Error.h"
#include "RegexPatterns.h"
#include "common/TestSupport.h"
#include "text/Regex.h"
#include "text/Unicode.h"

namespace fs = std::filesystem;
using namespace strata;

#ifndef STRATA_TEST_HAS_PCRE2

TEST(RegexPcre2, ComparedWithPcre2) {
  GTEST_SKIP() << "PCRE2 (libpcre2-dev) is not installed: nothing to compare with";
}

#else

namespace {

using Matches = std::vector<std::pair<std::size_t, std::size_t> >;

std::string utf8(char32_t cp) {
  std::string s;
  text::unicode::appendUtf8(s, cp);
  return s;
}

// The text with every byte outside printable ASCII written as \xHH, for messages.
std::string shown(const std::string& s) {
  std::ostringstream out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\')
      out << c;
    else
      out << "\\x" << std::hex << std::uppercase << (c < 16 ? "0" : "") << static_cast<int>(c) << std::dec;
  }
  return out.str();
}

std::string shownMatches(const std::string& text, const Matches& m) {
  std::string out;
  for (const auto& [b, e] : m) out += "[" + shown(text.substr(b, e - b)) + "]";
  return out;
}

// Pieces random texts are made of: words, spaces and newlines of every kind,
// apostrophes, digits of several scripts, marks, emoji, letters of each case
// category, code points whose case folds specially, and invalid UTF-8.
std::vector<std::string> textPieces() {
  return {"a",
          "Z",
          "the",
          "The",
          "HELLO",
          "camelCase",
          "XMLHttp",
          "x",
          "0",
          "7",
          "123",
          "45678",
          " ",
          "  ",
          "   ",
          "\t",
          "\n",
          "\r\n",
          "\r",
          "\n\n",
          " \n",
          "\v",
          "\f",
          "'",
          "'s",
          "'S",
          "'t",
          "'re",
          "'RE",
          "'ve",
          "'m",
          "'ll",
          "'LL",
          "'d",
          "'D",
          "''",
          "!",
          "?",
          ".",
          ",",
          "...",
          "-",
          "/",
          "//",
          "(",
          ")",
          "\"",
          "#",
          "$",
          "%",
          "&",
          "*",
          "+",
          "<|endoftext|>",
          "<|startoftext|>",
          "_",
          "__init__",
          "\xC3\xA9",                                          // é
          "\xC3\x89",                                          // É
          "e\xCC\x81",                                         // e + combining acute
          "\xCC\x81",                                          // a lone combining acute (Mn)
          "\xE0\xA4\xBE",                                      // ा DEVANAGARI VOWEL SIGN AA (Mc)
          "\xE2\x83\x9D",                                      // ⃝ combining enclosing circle (Me)
          "\xC3\x9F",                                          // ß
          "\xE1\xBA\x9E",                                      // ẞ
          "\xC5\xBF",                                          // ſ long s (folds to s)
          "\xE2\x84\xAA",                                      // K Kelvin sign (folds to k)
          "\xC7\x85",                                          // ǅ (Lt)
          "\xCA\xB0",                                          // ʰ (Lm)
          "\xE3\x80\x85",                                      // 々 (Lm)
          "\xE4\xB8\xAD\xE6\x96\x87",                          // 中文 (Lo)
          "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",              // 日本語
          "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",              // 한국어
          "\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1",          // Ωμέγα
          "\xCF\x82\xCE\xA3\xCF\x83",                          // ςΣσ
          "\xD0\x9F\xD0\xA0\xD0\x98\xD0\x92\xD0\x95\xD0\xA2",  // ПРИВЕТ
          "\xD9\xA1\xD9\xA2\xD9\xA3",                          // ١٢٣ Arabic-Indic digits (Nd)
          "\xC2\xBD",                                          // ½ (No)
          "\xE2\x85\xAB",                                      // Ⅻ (Nl)
          "\xC2\xB2",                                          // ² (No)
          "\xEF\xBC\x91",                                      // １ fullwidth digit
          "\xC2\xA0",                                          // no-break space (Zs)
          "\xE3\x80\x80",                                      // ideographic space
          "\xE2\x80\xA8",                                      // line separator (Zl)
          "\xE2\x80\xA9",                                      // paragraph separator (Zp)
          "\xC2\x85",                                          // NEL
          "\xE1\xA0\x8E",                                      // U+180E Mongolian vowel separator (Cf, in \h)
          "\xE2\x80\x8B",                                      // zero-width space (Cf)
          "\xEF\xBB\xBF",                                      // BOM
          "\xE2\x80\x99",                                      // ’
          "\xE2\x80\x94",                                      // —
          "\xE2\x82\xAC",                                      // €
          "\xF0\x9F\x98\x80",                                  // 😀
          "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",                  // 👍🏽
          "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",  // family (ZWJ)
          "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",                                          // 🇫🇷
          "\xF0\x9D\x90\x80",                                                          // 𝐀 (Lu, plane 1)
          "\xF0\x90\x90\x80",  // 𐐀 Deseret capital (folds in plane 1)
          "\xEE\x80\x80",      // private use (Co)
          "\xFF",              // invalid byte
          "\xC3",              // truncated sequence
          "\x80",              // lone continuation byte
          "\xED\xA0\x80",      // an encoded surrogate (invalid)
          "\xC0\xAF"};         // overlong '/'
}

std::string randomText(std::mt19937& rng, const std::vector<std::string>& pieces, bool withInvalid) {
  std::uniform_int_distribution<int> length(0, 24);
  std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<std::uint32_t> anyCp(0, 0x10FFFF);
  std::uniform_int_distribution<std::uint32_t> bmpCp(0x80, 0xFFFF);
  std::string s;
  const int n = length(rng);
  for (int i = 0; i < n; ++i) {
    const int k = kind(rng);
    if (k == 0 || k == 1) {
      // A random code point (not a surrogate), from anywhere or from the BMP.
      char32_t cp = k == 0 ? anyCp(rng) : bmpCp(rng);
      if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
      s += utf8(cp);
    } else {
      std::string piece = pieces[pick(rng)];
      const auto first = static_cast<unsigned char>(piece[0]);
      const bool invalid = (first == 0xFF || first == 0xC3 || first == 0x80 || first == 0xED || first == 0xC0) &&
                           text::unicode::decodeUtf8(piece).find(0xFFFD) != std::u32string::npos;
      if (invalid && !withInvalid) continue;
      s += piece;
    }
  }
  return s;
}

std::vector<std::string> fixedTexts() {
  return {"",
          "Hello world",
          "Hello world's end, isn't it? I'll be there; we've done it. They'd say I'm ok.",
          "SHOUTING'S LOUD AND WE'LL HEAR IT'S ECHO",
          "  leading and trailing spaces   ",
          "tabs\tand\nnewlines\r\nand\r\rreturns\n\n\n",
          "numbers 1 12 123 1234 12345 3.14159 1,000,000",
          "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 cafe\xCC\x81",
          "emoji \xF0\x9F\x98\x80\xF0\x9F\x98\x80 and \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!",
          "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95 mixed with English",
          "camelCaseWords and XMLHttpRequest and iPhone",
          "path/to/file.txt // comment\n/* block */",
          "a photo of sks person wearing a red hat",
          "   \n   \n\t\t\n   x",
          "x   ",
          "x   \n",
          "'''''ssss'S'S'",
          "\xC5\xBF\xE2\x84\xAA 'S '\xC5\xBF 'K",
          "<|startoftext|>a photo<|endoftext|>"};
}

// Every tokenizer.json regex under the fixture root (Split and Replace patterns).
void collectRegexes(const nlohmann::json& j, std::set<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "vocab" || it.key() == "merges") continue;
      if (it.key() == "Regex" && it.value().is_string()) out.insert(it.value().get<std::string>());
      collectRegexes(it.value(), out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collectRegexes(v, out);
  }
}

std::vector<std::string> fixturePatterns() {
  std::set<std::string> found;
  const fs::path root = test::referenceDir();
  if (fs::exists(root))
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().filename() == "tokenizer.json")
        collectRegexes(nlohmann::json::parse(std::ifstream(e.path())), found);
  return {found.begin(), found.end()};
}

// Compares the two engines on `texts`; stops after a few differences.
void compareOn(const std::string& pattern, const std::vector<std::string>& texts) {
  SCOPED_TRACE("pattern: " + pattern);
  const text::Regex ours(pattern, "test pattern");
  const test::Pcre2Regex ref(pattern);
  int differences = 0;
  for (const std::string& t : texts) {
    const Matches got = ours.findAll(t);
    const Matches want = ref.findAll(t);
    if (got != want) {
      ADD_FAILURE() << "text \"" << shown(t) << "\"\n  strata: " << shownMatches(t, got)
                    << "\n  pcre2:  " << shownMatches(t, want);
      if (++differences == 5) return;
    }
  }
}

std::vector<std::string> manyTexts(std::uint32_t seed, int count, bool withInvalid) {
  std::mt19937 rng(seed);
  const auto pieces = textPieces();
  std::vector<std::string> texts = fixedTexts();
  for (int i = 0; i < count; ++i) texts.push_back(randomText(rng, pieces, withInvalid));
  return texts;
}

}  // namespace

TEST(RegexPcre2, TokenizerPatternsSplitAsPcre2Does) {
  const auto texts = manyTexts(20261206, 4000, true);
  for (const std::string& p : test::tokenizerPatterns()) compareOn(p, texts);
}

TEST(RegexPcre2, FixturePatternsSplitAsPcre2Does) {
  const auto patterns = fixturePatterns();
  std::cout << "[regex] " << patterns.size() << " regex pattern(s) in the tokenizer.json files under "
            << test::referenceDir() << std::endl;
  const auto texts = manyTexts(7, 2000, true);
  for (const std::string& p : patterns) compareOn(p, texts);
}

TEST(RegexPcre2, EveryCodePointInEveryClassAsPcre2) {
  // All code points but the surrogates, in order: the runs X+ finds are equal
  // exactly when both engines put the same code points in X.
  std::string all;
  for (char32_t cp = 0; cp < 0x110000; ++cp)
    if (cp < 0xD800 || cp >= 0xE000) text::unicode::appendUtf8(all, cp);
  const std::vector<std::string> classes = {R"(\s)",
                                            R"(\S)",
                                            R"(\d)",
                                            R"(\D)",
                                            R"(\w)",
                                            R"(\W)",
                                            R"(\h)",
                                            R"(\H)",
                                            R"(\v)",
                                            R"(\V)",
                                            R"(.)",
                                            R"(\p{L})",
                                            R"(\p{Lu})",
                                            R"(\p{Ll})",
                                            R"(\p{Lt})",
                                            R"(\p{Lm})",
                                            R"(\p{Lo})",
                                            R"(\p{L&})",
                                            R"(\p{M})",
                                            R"(\p{Mn})",
                                            R"(\p{Mc})",
                                            R"(\p{Me})",
                                            R"(\p{N})",
                                            R"(\p{Nd})",
                                            R"(\p{Nl})",
                                            R"(\p{No})",
                                            R"(\p{P})",
                                            R"(\p{Pc})",
                                            R"(\p{Pd})",
                                            R"(\p{Ps})",
                                            R"(\p{Pe})",
                                            R"(\p{Pi})",
                                            R"(\p{Pf})",
                                            R"(\p{Po})",
                                            R"(\p{S})",
                                            R"(\p{Sm})",
                                            R"(\p{Sc})",
                                            R"(\p{Sk})",
                                            R"(\p{So})",
                                            R"(\p{Z})",
                                            R"(\p{Zs})",
                                            R"(\p{Zl})",
                                            R"(\p{Zp})",
                                            R"(\p{C})",
                                            R"(\p{Cc})",
                                            R"(\p{Cf})",
                                            R"(\p{Co})",
                                            R"(\p{Cn})",
                                            R"(\P{L})",
                                            R"(\PN)",
                                            R"(\pL)",
                                            R"(\p{^N})",
                                            R"([^\s\p{L}\p{N}])",
                                            R"([^\r\n\p{L}\p{N}])",
                                            R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])",
                                            R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])",
                                            R"([\P{L}\d])",
                                            R"([^\P{L}\d])",
                                            R"([a-z\x{4E00}-\x{9FFF}\d])"};
  for (const std::string& c : classes) {
    SCOPED_TRACE("class " + c);
    const std::string p = c + "+";
    const Matches got = text::Regex(p, "test").findAll(all);
    const Matches want = test::Pcre2Regex(p).findAll(all);
    EXPECT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
      if (got[k] != want[k]) {
        char32_t at = text::unicode::decodeUtf8(all.substr(std::min(got[k].first, want[k].first), 4))[0];
        ADD_FAILURE() << "first difference at run " << k << " near U+" << std::hex << static_cast<std::uint32_t>(at);
        break;
      }
    }
  }
}

TEST(RegexPcre2, CaselessMatchingOfEveryCasedCodePointAsPcre2) {
  // Code points whose case differs from another's (by Strata's table), as one text.
  std::string cased;
  std::vector<char32_t> candidates;
  for (char32_t cp = 0; cp < 0x20000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    const auto cat = text::unicode::category(cp);
    if (cat == text::unicode::Category::kCn || cat == text::unicode::Category::kCo) continue;
    candidates.push_back(cp);
    if (text::unicode::caseVariants(cp).size() > 1) cased += utf8(cp);
  }
  ASSERT_GT(cased.size(), 2000u);
  // For each assigned code point: (?i) and the code point finds the same places in
  // `cased` with both engines (PCRE2's interpreter: 10^5 patterns to compile).
  int differences = 0;
  for (char32_t cp : candidates) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%X", static_cast<unsigned>(cp));
    const std::string p = std::string("(?i)\\x{") + hex + "}";
    const Matches want = test::Pcre2Regex(p, false).findAll(cased);
    const Matches got = text::Regex(p, "test").findAll(cased);
    if (got != want) {
      ADD_FAILURE() << "(?i) U+" << hex << ": strata " << shownMatches(cased, got) << " pcre2 "
                    << shownMatches(cased, want);
      if (++differences == 10) break;
    }
  }
  // And a caseless class with ranges.
  compareOn(R"((?i)[a-f\x{3B1}-\x{3B5}\x{17F}]+)", {cased, "ABCDEFGHabcdefgh \xCE\x91\xCE\x92\xCF\x82\xC5\xBF"});
}

TEST(RegexPcre2, TheRestOfTheSyntaxAsPcre2) {
  // clang-format off
  const std::vector<std::string> patterns = {
      // alternation, counted / lazy / possessive repeats, atomic groups
      R"(a|ab|abc)", R"((?:ab|a)(?:bc|c)?)", R"(\p{L}+?\p{N})", R"(\p{L}{2,3})", R"(\p{L}{2,3}?)",
      R"(\p{L}{2,}+)", R"(\p{L}{3})", R"((?:\p{L}\p{N}?){1,3})", R"((?:\p{L}\p{N}?){1,3}?x)",
      R"((?:a|b)*+b)", R"((?:'s|'t)++)", R"((?>\p{L}+)\p{L})", R"((?>a|ab)c)", R"(a{0}b)",
      R"((?:ab){0,2}+a)", R"((?:a{2,3}){2})", R"([\s\S]{2,4}?x)", R"((a+|b+)*c)", R"((?:a|b)*?b)",
      R"((?>(?:a|b)*)b)",
      // lookahead (also quantified) and anchors
      R"(\s+(?=\p{Lu}))", R"(\p{L}+(?!\p{N}))", R"((?=(?:\p{L}\p{N})+)\p{L})", R"((?=a)*b)", R"((?!a)+b)",
      R"((?:(?=a))*a)", R"(^\s*|\s*$)", R"(^\p{L}+|\p{L}+$)", R"(\s+\z)", R"(\s+\Z)", R"(\A\p{L}+)",
      R"(\b\p{L}+\b)", R"(\B\p{L})", R"((?m)^\p{L}+$)", R"((?:a*)+$)",
      // dot, flags, groups, loops that can match empty
      R"((?s).{1,3})", R"(.{1,3})", R"(.+?\n)", R"((?i)hello|world)", R"((?i:the)\s+(?-i:The))",
      R"(a(?i)b|c)", R"((a)(?:b(c))?)", R"((?<word>\p{L}+)\s)", R"(x*)", R"(\s*)", R"((?:)*)",
      R"((?:a?)*b)", R"((?:\s*)*+\S)", R"((a|)+b)",
      // classes, escapes, literals; \p ignores (?i) as in PCRE2
      R"([\d\s]+)", R"([^\d\s]+)", R"([-a-c]+)", R"([a-c-]+)", R"([]a]+)", R"([^]a]+)",
      R"(\x41\x{E9}\x{1F600})", R"([\x{1F600}-\x{1F64F}]+)", R"(\Q.*+\E+)", R"(\.\*\+\?\(\)\[\]\{\}\|\\\/)",
      R"(a{,3})", R"({)", R"(\t\n\r\f\e\a)", R"(\0101|\o{102})", R"((?#comment)\p{N}+)", R"([\w']+)",
      R"(\W+)", R"((?i)\p{Lu}+)", R"((?i)[\p{Ll}]+)", R"((?i)[^a-z]+)", R"((?i)\x{DF}+)", R"((?i)[^\x{DF}]+)",
      R"((?i)[k-l]+)"};
  // clang-format on
  const auto texts = manyTexts(99, 1500, false);
  std::vector<std::string> extra = texts;
  extra.push_back("aaab abab abc ac x{,3} { a{2} .*+.*+ ABC\x41\xC3\xA9\xF0\x9F\x98\x80");
  extra.push_back(std::string("A\x1B\x07\t\n\r\f", 8));
  for (const std::string& p : patterns) compareOn(p, extra);
}

// A random pattern of the syntax the engine takes, from a fixed seed: literals,
// classes, anchors, groups of every kind, quantifiers with every suffix, nested.
class PatternMaker {
 public:
  explicit PatternMaker(std::uint32_t seed) : rng_(seed) {}

  std::string alternation(int depth) {
    std::string s;
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      if (i) s += "|";
      const int m = pick(4);
      for (int k = 0; k < m; ++k) s += atom(depth);
    }
    return s;
  }

  std::string text() {
    static const char* const kPieces[] = {"a",        "b",  "A",  "B",        "'",  "'s",          "'S",
                                          " ",        "  ", "\n", "1",        "12", "\xC3\xA9",    "\xC3\x89",
                                          "\xCC\x81", "s",  "S",  "\xC5\xBF", "!",  "\xE4\xB8\xAD"};
    std::string s;
    const int n = pick(14);
    for (int i = 0; i < n; ++i) s += kPieces[pick(20)];
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::string quantifier() {
    static const char* const kCounts[] = {"", "", "", "?", "*", "+", "{2}", "{1,}", "{0,2}", "{1,3}"};
    static const char* const kSuffixes[] = {"", "", "?", "+"};
    std::string q = kCounts[pick(10)];
    if (!q.empty()) q += kSuffixes[pick(4)];
    return q;
  }

  std::string atom(int depth) {
    static const char* const kLiterals[] = {"a", "b", "A", "'", " ", "\\n", "1", "\xC3\xA9", "s", "S"};
    static const char* const kClasses[] = {"\\s",
                                           "\\S",
                                           "\\d",
                                           "\\w",
                                           "\\p{L}",
                                           "\\p{Lu}",
                                           "\\p{N}",
                                           "[ab]",
                                           "[^a\\s]",
                                           "[\\p{L}\\p{N}]",
                                           "[^\\r\\n\\p{L}\\p{N}]",
                                           ".",
                                           "\\p{M}"};
    static const char* const kAnchors[] = {"^", "$", "\\b", "\\B", "\\z", "\\Z"};
    static const char* const kOpen[] = {"(?:", "(?i:", "(?=", "(?!", "(?>", "("};
    const int k = pick(depth > 2 ? 8 : 12);
    if (k < 3) return kLiterals[pick(10)] + quantifier();
    if (k < 6) return kClasses[pick(13)] + quantifier();
    if (k < 7) return kAnchors[pick(6)];
    if (k < 8) return kLiterals[pick(10)];
    return std::string(kOpen[pick(6)]) + alternation(depth + 1) + ")" + quantifier();
  }

  std::mt19937 rng_;
};

TEST(RegexPcre2, RandomPatternsAsPcre2sInterpreter) {
  // The reference is PCRE2's interpreter without auto-possessification (see
  // Pcre2Reference.h). A pattern that runs out of steps here but not in PCRE2
  // (whose start-of-match checks can skip the search) is counted, not compared.
  PatternMaker maker(20261206);
  int compared = 0, gaveUp = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string p = maker.alternation(0);
    SCOPED_TRACE("pattern " + p);
    std::unique_ptr<test::Pcre2Regex> ref;
    try {
      ref = std::make_unique<test::Pcre2Regex>(p, false);
    } catch (const std::exception&) {
      continue;  // not a pattern PCRE2 takes either
    }
    const text::Regex ours(p, "random pattern");
    for (int t = 0; t < 25; ++t) {
      const std::string s = maker.text();
      Matches got;
      try {
        got = ours.findAll(s);
      } catch (const Error&) {
        ++gaveUp;
        break;
      }
      const Matches want = ref->findAll(s);
      ASSERT_EQ(got, want) << "text \"" << shown(s) << "\"\n  strata: " << shownMatches(s, got)
                           << "\n  pcre2:  " << shownMatches(s, want);
      ++compared;
    }
  }
  std::cout << "[regex] " << compared << " random pattern/text pairs as PCRE2's interpreter; " << gaveUp
            << " pattern(s) ran out of steps" << std::endl;
  EXPECT_GT(compared, 50000);
}

TEST(RegexPcre2, SpeedOnAMegabyteOfMixedText) {
  std::mt19937 rng(5);
  const auto pieces = textPieces();
  std::string big;
  while (big.size() < (1u << 20)) big += randomText(rng, pieces, false) + " ";
  for (const std::string* p : {&test::kGpt2Pattern, &test::kLlama3Pattern, &test::kTekkenPattern}) {
    const text::Regex ours(*p, "test");
    const test::Pcre2Regex ref(*p);
    auto time = [&](auto& engine, Matches& out) {
      const auto t0 = std::chrono::steady_clock::now();
      out = engine.findAll(big);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    Matches got, want;
    const double ourS = time(ours, got);
    const double refS = time(ref, want);
    EXPECT_EQ(got, want);
    const double mb = static_cast<double>(big.size()) / (1 << 20);
    std::cout << "[regex] " << mb << " MB, " << got.size() << " pieces: strata " << mb / ourS << " MB/s, PCRE2 JIT "
              << mb / refS << " MB/s (pattern " << p->substr(0, 30) << "...)" << std::endl;
  }
}

#endif
