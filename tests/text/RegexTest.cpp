// Strata's regex engine (core/text/Regex) on its own, on every machine: the
// tokenizer patterns split known texts as Hugging Face's tokenizers do, each
// piece of the syntax behaves as in Perl/PCRE2, what is not supported is refused
// naming `where` and the offset, and the bounds (pattern size, nesting, steps)
// hold. RegexPcre2Test compares it with PCRE2 itself where that is installed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "RegexPatterns.h"
#include "common/Error.h"
#include "text/Regex.h"

using namespace strata;

namespace {

// The matched pieces of `text`.
std::vector<std::string> pieces(const std::string& pattern, const std::string& text) {
  const text::Regex re(pattern, "test");
  std::vector<std::string> out;
  for (const auto& [b, e] : re.findAll(text)) out.push_back(text.substr(b, e - b));
  return out;
}

using Pieces = std::vector<std::string>;

// The IoError message of compiling `pattern`; fails the test if it compiles.
std::string compileError(const std::string& pattern) {
  try {
    text::Regex re(pattern, "some/tokenizer.json: pre_tokenizer.pattern.Regex");
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "\"" << pattern << "\" compiled, expected an IoError";
  return "";
}

}  // namespace

TEST(Regex, Gpt2SplitsContractionsWordsNumbersAndSpaces) {
  EXPECT_EQ(pieces(test::kGpt2Pattern, "Hello world's  end 123!!\n"),
            (Pieces{"Hello", " world", "'s", " ", " end", " 123", "!!", "\n"}));
  // Letters of any script and marks: \p{L}, then the mark goes with the punctuation run.
  EXPECT_EQ(pieces(test::kGpt2Pattern, " caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 e\xCC\x81"),
            (Pieces{" caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " e", "\xCC\x81"}));
  EXPECT_EQ(pieces(test::kGpt2Pattern, " \xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok  "),
            (Pieces{" \xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok", "  "}));
}

TEST(Regex, Llama3SplitsDigitsInThreesAndKeepsNewlineRuns) {
  EXPECT_EQ(pieces(test::kLlama3Pattern, "I'LL pay 12345 dollars\n\n  ok"),
            (Pieces{"I", "'LL", " pay", " ", "123", "45", " dollars", "\n\n", " ", " ok"}));
  // Qwen: one digit at a time; punctuation keeps the newlines that follow it.
  EXPECT_EQ(pieces(test::kQwenPattern, "v2.0!\n\nnext"), (Pieces{"v", "2", ".", "0", "!\n\n", "next"}));
}

TEST(Regex, TekkenSplitsWordsAtCaseChanges) {
  EXPECT_EQ(pieces(test::kTekkenPattern, "camelCaseXMLHttp path/to"),
            (Pieces{"camel", "Case", "XMLHttp", " path", "/to"}));
}

TEST(Regex, ClipKeepsItsSpecialTokensWhole) {
  EXPECT_EQ(pieces(test::kClipPattern, "<|startoftext|>a cat's hat!<|endoftext|>"),
            (Pieces{"<|startoftext|>", "a", "cat", "'s", "hat", "!<|", "endoftext", "|>"}));
}

TEST(Regex, GreedyLazyAndPossessiveQuantifiers) {
  EXPECT_EQ(pieces(R"(\p{L}+a)", "banana"), (Pieces{"banana"}));
  EXPECT_EQ(pieces(R"(\p{L}++a)", "banana"), Pieces{});  // possessive: gives nothing back
  EXPECT_EQ(pieces(R"((?:an)+an)", "banana"), (Pieces{"anan"}));
  EXPECT_EQ(pieces(R"((?:an)++an)", "banana"), Pieces{});
  EXPECT_EQ(pieces(R"(\p{L}+?)", "abc"), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(pieces(R"(\p{L}{2,3}?)", "abcde"), (Pieces{"ab", "cd"}));
  EXPECT_EQ(pieces(R"(\p{L}{2,3})", "abcde"), (Pieces{"abc", "de"}));
  EXPECT_EQ(pieces(R"(\p{N}{2})", "12345"), (Pieces{"12", "34"}));
  EXPECT_EQ(pieces(R"(\p{N}{2,})", "1 22 333"), (Pieces{"22", "333"}));
  EXPECT_EQ(pieces(R"((?:ab)*?c)", "ababc"), (Pieces{"ababc"}));
  EXPECT_EQ(pieces(R"(x*)", "axxb"), (Pieces{"xx"}));  // empty matches are stepped over
}

TEST(Regex, AlternationIsOrderedNotLongest) {
  EXPECT_EQ(pieces("a|ab", "ab"), (Pieces{"a"}));
  EXPECT_EQ(pieces("(?:a|ab)c", "abc"), (Pieces{"abc"}));    // backtracks into the alternation
  EXPECT_EQ(pieces("(?>a|ab)c", "abc ac"), (Pieces{"ac"}));  // atomic: no second try
}

TEST(Regex, LookaheadAndAnchors) {
  EXPECT_EQ(pieces(R"(\s+(?!\S))", "a   b   "), (Pieces{"  ", "   "}));
  EXPECT_EQ(pieces(R"(\p{L}+(?=\p{N}))", "ab1 cd"), (Pieces{"ab"}));
  EXPECT_EQ(pieces(R"(^\p{L}+|\p{N}+$)", "ab 12 cd 34"), (Pieces{"ab", "34"}));
  EXPECT_EQ(pieces(R"(\p{N}+$)", "12\n"), (Pieces{"12"}));  // $ before a final newline
  EXPECT_EQ(pieces(R"(\p{N}+\z)", "12\n"), Pieces{});
  EXPECT_EQ(pieces(R"((?m)^\p{L})", "ab\ncd"), (Pieces{"a", "c"}));
  EXPECT_EQ(pieces(R"(\b\p{L}+\b)", "one two3 four"), (Pieces{"one", "four"}));
}

TEST(Regex, CaselessGroupsFoldAsUnicodeDoes) {
  // 'ſ' (long s) and the Kelvin sign fold to s and k, as in PCRE2.
  EXPECT_EQ(pieces(R"((?i:'s|'ll|k))", "'S 'Ll '\xC5\xBF \xE2\x84\xAA 's"),
            (Pieces{"'S", "'Ll", "'\xC5\xBF", "\xE2\x84\xAA", "'s"}));
  EXPECT_EQ(pieces(R"((?i)[a-c\x{3C3}]+)", "xAbC\xCE\xA3\xCF\x82x"), (Pieces{"AbC\xCE\xA3\xCF\x82"}));
  EXPECT_EQ(pieces(R"(a(?i)b|c)", "aB C ab"), (Pieces{"aB", "C", "ab"}));  // (?i) runs to the group's end
  EXPECT_EQ(pieces(R"((?i:a)b)", "AB Ab"), (Pieces{"Ab"}));
}

TEST(Regex, ClassesEscapesAndProperties) {
  EXPECT_EQ(pieces(R"([^\s\p{L}\p{N}]+)", "a-b, c\xE2\x80\x94\xF0\x9F\x98\x80 d"),
            (Pieces{"-", ",", "\xE2\x80\x94\xF0\x9F\x98\x80"}));
  EXPECT_EQ(pieces(R"(\d+)", "1\xD9\xA1\xD9\xA2 \xC2\xBD"), (Pieces{"1\xD9\xA1\xD9\xA2"}));  // Nd, not ½
  EXPECT_EQ(pieces(R"(\pN+)", "\xC2\xBD\xE2\x85\xAB"), (Pieces{"\xC2\xBD\xE2\x85\xAB"}));    // N: No and Nl
  EXPECT_EQ(pieces(R"(\p{Lu}\p{Ll}+)", "Hello WORLD World"), (Pieces{"Hello", "World"}));
  EXPECT_EQ(pieces(R"(\P{L}+)", "ab12cd"), (Pieces{"12"}));
  EXPECT_EQ(pieces(R"(\p{^L}+)", "ab12cd"), (Pieces{"12"}));
  EXPECT_EQ(pieces(R"(\s+)",
                   "a\xC2\xA0\xE3\x80\x80\xE2\x80\xA8"
                   "b"),
            (Pieces{"\xC2\xA0\xE3\x80\x80\xE2\x80\xA8"}));
  EXPECT_EQ(pieces(R"([\x{1F600}-\x{1F64F}]+)",
                   "a\xF0\x9F\x98\x80\xF0\x9F\x98\x81"
                   "b"),
            (Pieces{"\xF0\x9F\x98\x80\xF0\x9F\x98\x81"}));
  EXPECT_EQ(pieces(R"([]a-]+)", "x]a-x"), (Pieces{"]a-"}));
  EXPECT_EQ(pieces(R"(\Q.*\E+)", "a.** .*"), (Pieces{".**", ".*"}));
  EXPECT_EQ(pieces(R"(.+)", "ab\ncd"), (Pieces{"ab", "cd"}));
  EXPECT_EQ(pieces(R"((?s).+)", "ab\ncd"), (Pieces{"ab\ncd"}));
  EXPECT_EQ(pieces(R"(\w+)", "snake_case x1"), (Pieces{"snake_case", "x1"}));
}

TEST(Regex, InvalidUtf8MatchesNothing) {
  EXPECT_EQ(pieces(R"(\S+)",
                   "ab\xFF"
                   "cd\xC3"),
            (Pieces{"ab", "cd"}));
  EXPECT_EQ(pieces(R"(.)",
                   "\xED\xA0\x80"
                   "a"),
            (Pieces{"a"}));                            // an encoded surrogate
  EXPECT_EQ(pieces(R"([^a])", "\xC0\xAF"), Pieces{});  // an overlong '/'
}

TEST(Regex, RefusesWhatItDoesNotSupportNamingWhereAndOffset) {
  struct Case {
    const char* pattern;
    std::size_t offset;
    const char* says;
  };
  const Case cases[] = {
      {R"(\p{L}+|(\p{N})\1)", 14, "backreference"},
      {R"(x(?<=a)b)", 1, "lookbehind"},
      {R"(\p{Han}+)", 0, "\"Han\""},
      {R"(a(b)", 1, "missing ')'"},
      {R"(ab))", 2, "unmatched ')'"},
      {R"(a**)", 2, "quantifier follows a quantifier"},
      {R"(*a)", 0, "nothing to repeat"},
      {R"(x[a-)", 1, "without its ']'"},
      {R"([z-a])", 1, "out of order"},
      {R"((?x)a)", 2, "'x'"},
      {R"(a{3,2})", 1, "m < n"},
      {R"(ab\q)", 2, "\\q"},
      {R"((?R))", 0, "recursion"},
      {R"([[:alpha:]])", 1, "POSIX"},
      {"a\xFF", 1, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    const std::string e = compileError(c.pattern);
    EXPECT_NE(e.find("some/tokenizer.json: pre_tokenizer.pattern.Regex"), std::string::npos) << e;
    EXPECT_NE(e.find("at offset " + std::to_string(c.offset) + ":"), std::string::npos) << c.pattern << " -> " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.pattern << " -> " << e;
  }
}

TEST(Regex, BoundsOnPatternSizeNestingAndProgram) {
  EXPECT_NE(compileError(std::string(20000, 'a')).find("more than the 16384"), std::string::npos);
  EXPECT_NE(compileError(std::string(300, '(') + std::string(300, ')')).find("nest deeper"), std::string::npos);
  // Counted repeats copy what they repeat: 300 x 300 x 2 instructions is too many.
  EXPECT_NE(compileError("(?:(?:ab){300}){300}").find("instructions"), std::string::npos);
  EXPECT_NE(compileError("a{70000}").find("above 65535"), std::string::npos);
}

TEST(Regex, ExponentialBacktrackingStopsWithAnError) {
  const text::Regex re("(?:a+)+b", "hostile.json: pre_tokenizer.pattern.Regex");
  const std::string text(64, 'a');
  try {
    re.findAll(text);
    ADD_FAILURE() << "(?:a+)+b on 64 a's finished; it should have run out of steps";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("hostile.json: pre_tokenizer.pattern.Regex"), std::string::npos) << m;
    EXPECT_NE(m.find("gave up after " + std::to_string(text::Regex::stepBudget(text.size())) + " steps"),
              std::string::npos)
        << m;
  }
  // The same pattern where it matches quickly is fine.
  EXPECT_EQ(pieces("(?:a+)+b", "aaab"), (Pieces{"aaab"}));
}

TEST(Regex, LongRunsNeedNoDeepStack) {
  // One repeat over a megabyte, a loop of groups over 100k characters, and
  // 200k spaces before a word through the GPT-2 pattern's lookahead.
  const std::string letters(1 << 20, 'x');
  EXPECT_EQ(pieces(R"(\p{L}+)", letters).size(), 1u);
  std::string pairs;
  for (int i = 0; i < 50000; ++i) pairs += "ab";
  EXPECT_EQ(pieces("(?:a|b)+", pairs), Pieces{pairs});
  const std::string spaces = std::string(200000, ' ') + "x";
  const auto got = pieces(test::kGpt2Pattern, spaces);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].size(), 199999u);
  EXPECT_EQ(got[1], " x");
}
