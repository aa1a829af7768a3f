#include "text/Regex.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <limits>

#include "common/Error.h"
#include "text/Unicode.h"

// The pattern is parsed into a tree (Node), the tree is compiled into a small
// program (Inst), and a backtracking machine runs the program with an explicit
// stack (Frame), so neither a long text nor a deep pattern grows the C++ stack
// beyond the parser's nesting limit.

namespace strata::text {
namespace {

using unicode::Category;

constexpr std::size_t kMaxPatternBytes = 16 * 1024;
constexpr std::size_t kMaxInstructions = 65536;
constexpr int kMaxNesting = 250;
constexpr int kMaxCount = 65535;  // the largest n in {n,m}, as PCRE2
constexpr std::size_t kBaseSteps = 10'000'000;
constexpr std::size_t kStepsPerByte = 256;  // the tokenizer patterns take 5 to 9 a byte
constexpr int kUnbounded = -1;

// ---- UTF-8 ----

// Decodes the code point at s[i] (i < s.size()); returns its length in bytes, or
// 0 where the bytes are not valid UTF-8 (overlong, surrogate, truncated).
inline int decodeAt(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  const std::size_t left = s.size() - i;
  auto cont = [&](std::size_t k) { return (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto low = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 >= 0xC2 && b0 < 0xE0) {
    if (left < 2 || !cont(1)) return 0;
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | low(1);
    return 2;
  }
  if (b0 >= 0xE0 && b0 < 0xF0) {
    if (left < 3 || !cont(1) || !cont(2)) return 0;
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (low(1) << 6) | low(2);
    if (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return 3;
  }
  if (b0 >= 0xF0 && b0 < 0xF5) {
    if (left < 4 || !cont(1) || !cont(2) || !cont(3)) return 0;
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (low(1) << 12) | (low(2) << 6) | low(3);
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;
    return 4;
  }
  return 0;
}

// The code point that ends at s[i] (i > 0), if the bytes before i end in a valid one.
bool decodeBefore(std::string_view s, std::size_t i, char32_t& cp) {
  std::size_t start = i - 1;
  while (start > 0 && i - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const int n = decodeAt(s, start, cp);
  return n > 0 && start + static_cast<std::size_t>(n) == i;
}

// ---- character sets ----

constexpr std::uint32_t bit(Category c) { return 1u << static_cast<unsigned>(c); }
constexpr std::uint32_t kLetters =
    bit(Category::kLu) | bit(Category::kLl) | bit(Category::kLt) | bit(Category::kLm) | bit(Category::kLo);
constexpr std::uint32_t kNumbers = bit(Category::kNd) | bit(Category::kNl) | bit(Category::kNo);
constexpr std::uint32_t kSeparators = bit(Category::kZs) | bit(Category::kZl) | bit(Category::kZp);
constexpr std::uint32_t kAllCategories = (1u << unicode::kCategoryCount) - 1;

// \h and \v as PCRE2 lists them; \s in UCP mode is \p{Z}, \h or \v.
bool isHSpace(char32_t c) {
  return c == 0x09 || c == 0x20 || c == 0xA0 || c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}
bool isVSpace(char32_t c) { return (c >= 0x0A && c <= 0x0D) || c == 0x85 || c == 0x2028 || c == 0x2029; }
bool isSpaceUcp(char32_t c, Category cat) { return isHSpace(c) || isVSpace(c) || (bit(cat) & kSeparators) != 0; }
bool isWordUcp(char32_t c, Category cat) { return c == '_' || (bit(cat) & (kLetters | kNumbers)) != 0; }

enum class Shorthand : std::uint8_t { kSpace, kWord, kHSpace, kVSpace };

// A set of code points: ranges, categories (\p), categories left out (\P, \D) and
// the shorthands \s \w \h \v with their negations, optionally negated as a whole.
struct CharSet {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::uint32_t categories = 0;
  std::vector<std::uint32_t> notCategories;            // matches a code point outside any one of them
  std::vector<std::pair<Shorthand, bool>> shorthands;  // (which, negated)
  bool negated = false;
  std::array<std::uint64_t, 2> ascii{};  // the answer for U+0000..U+007F, filled by finish()

  bool contains(char32_t c) const {
    if (c < 0x80) return (ascii[c >> 6] >> (c & 63)) & 1;
    return slowContains(c, unicode::category(c)) != negated;
  }

  bool slowContains(char32_t c, Category cat) const {
    auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                               [](char32_t v, const std::pair<char32_t, char32_t>& r) { return v < r.first; });
    if (it != ranges.begin() && c <= (it - 1)->second) return true;
    if (categories & bit(cat)) return true;
    for (std::uint32_t m : notCategories)
      if (!(m & bit(cat))) return true;
    for (const auto& [which, neg] : shorthands) {
      bool in = false;
      switch (which) {
        case Shorthand::kSpace:
          in = isSpaceUcp(c, cat);
          break;
        case Shorthand::kWord:
          in = isWordUcp(c, cat);
          break;
        case Shorthand::kHSpace:
          in = isHSpace(c);
          break;
        case Shorthand::kVSpace:
          in = isVSpace(c);
          break;
      }
      if (in != neg) return true;
    }
    return false;
  }

  // Sorts and merges the ranges (adding every case variant first when caseless)
  // and fills the ASCII table.
  void finish(bool caseless) {
    if (caseless && !ranges.empty()) {
      // Only the code points that have a case add anything: visit those in each range.
      const std::u32string& cased = unicode::casedCodePoints();
      std::vector<std::pair<char32_t, char32_t>> extra;
      for (const auto& [lo, hi] : ranges) {
        for (auto it = std::lower_bound(cased.begin(), cased.end(), lo); it != cased.end() && *it <= hi; ++it)
          for (char32_t v : unicode::caseVariants(*it))
            if (v != *it) extra.emplace_back(v, v);
      }
      ranges.insert(ranges.end(), extra.begin(), extra.end());
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<char32_t, char32_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    ranges.swap(merged);
    for (char32_t c = 0; c < 0x80; ++c)
      if (slowContains(c, unicode::category(c)) != negated) ascii[c >> 6] |= std::uint64_t{1} << (c & 63);
  }
};

// The category mask for a \p name, or 0 when the name is not one Strata knows:
// a general category (Lu), a major class (L: every category that starts with L),
// L& or LC (cased letters), Any.
std::uint32_t categoryMask(const std::string& name) {
  static const char* const kNames[unicode::kCategoryCount] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  std::uint32_t mask = 0;
  for (int c = 0; c < unicode::kCategoryCount; ++c)
    if (name == kNames[c] || (name.size() == 1 && name[0] == kNames[c][0])) mask |= 1u << c;
  if (name == "L&" || name == "LC") mask = bit(Category::kLu) | bit(Category::kLl) | bit(Category::kLt);
  if (name == "Any") mask = kAllCategories;
  return mask;
}

// ---- the tree ----

enum class Greed : std::uint8_t { kGreedy, kLazy, kPossessive };
enum class Anchor : std::uint8_t {
  kBegin,            // ^ (not multiline), \A
  kLineBegin,        // ^ with (?m)
  kEnd,              // $ (not multiline), \Z: the end, or before a newline that ends the text
  kLineEnd,          // $ with (?m)
  kTextEnd,          // \z
  kWordBoundary,     // \b
  kNotWordBoundary,  // \B
};

struct Node {
  enum class Type : std::uint8_t { kEmpty, kChar, kSet, kAny, kAnchor, kConcat, kAlt, kRepeat, kAtomic, kLook };
  Type type = Type::kEmpty;
  char32_t cp = 0;        // kChar (the simple fold when caseless)
  bool caseless = false;  // kChar
  bool dotAll = false;    // kAny
  int set = -1;           // kSet
  Anchor anchor = Anchor::kBegin;
  int min = 0, max = 0;  // kRepeat; max kUnbounded for no limit
  Greed greed = Greed::kGreedy;
  bool negative = false;    // kLook
  bool literalRun = false;  // kConcat of a \Q...\E
  std::size_t at = 0;       // offset in the pattern, for errors
  std::vector<std::unique_ptr<Node>> kids;
};

using NodePtr = std::unique_ptr<Node>;

NodePtr makeNode(Node::Type type, std::size_t at) {
  auto n = std::make_unique<Node>();
  n->type = type;
  n->at = at;
  return n;
}

bool isSingle(const Node& n) {
  return n.type == Node::Type::kChar || n.type == Node::Type::kSet || n.type == Node::Type::kAny;
}

bool canBeEmpty(const Node& n) {
  switch (n.type) {
    case Node::Type::kEmpty:
    case Node::Type::kAnchor:
    case Node::Type::kLook:
      return true;
    case Node::Type::kChar:
    case Node::Type::kSet:
    case Node::Type::kAny:
      return false;
    case Node::Type::kConcat:
      return std::all_of(n.kids.begin(), n.kids.end(), [](const NodePtr& k) { return canBeEmpty(*k); });
    case Node::Type::kAlt:
      return std::any_of(n.kids.begin(), n.kids.end(), [](const NodePtr& k) { return canBeEmpty(*k); });
    case Node::Type::kRepeat:
      return n.min == 0 || canBeEmpty(*n.kids[0]);
    case Node::Type::kAtomic:
      return canBeEmpty(*n.kids[0]);
  }
  return true;
}

// ---- the parser ----

struct Flags {
  bool caseless = false;
  bool dotAll = false;
  bool multiline = false;
};

class Parser {
 public:
  Parser(std::string_view pattern, const std::string& where, std::vector<CharSet>& sets)
      : p_(pattern), where_(where), sets_(sets) {}

  NodePtr parse() {
    if (p_.size() > kMaxPatternBytes)
      fail(0, "the pattern is " + std::to_string(p_.size()) + " bytes, more than the " +
                  std::to_string(kMaxPatternBytes) + " Strata reads");
    Flags flags;
    NodePtr n = parseAlternation(flags, 0);
    if (i_ < p_.size()) fail(i_, "unmatched ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    const std::size_t from = at > 20 ? at - 20 : 0;
    std::string near(p_.substr(from, 40));
    throw IoError(where_ + ": the regex pattern does not compile at offset " + std::to_string(at) + ": " + what +
                  " (near \"" + near + "\")");
  }

  bool more() const { return i_ < p_.size(); }
  char peek(std::size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0'; }
  bool accept(char c) {
    if (peek() != c || !more()) return false;
    ++i_;
    return true;
  }

  char32_t nextCodePoint() {
    char32_t cp = 0;
    const int n = decodeAt(p_, i_, cp);
    if (n == 0) fail(i_, "the pattern is not valid UTF-8");
    i_ += static_cast<std::size_t>(n);
    return cp;
  }

  // alternation := concat ('|' concat)*   (stops before ')' or at the end)
  NodePtr parseAlternation(Flags& flags, int depth) {
    if (depth > kMaxNesting) fail(i_, "groups nest deeper than " + std::to_string(kMaxNesting));
    const std::size_t at = i_;
    std::vector<NodePtr> alts;
    alts.push_back(parseConcat(flags, depth));
    while (accept('|')) alts.push_back(parseConcat(flags, depth));
    if (alts.size() == 1) return std::move(alts[0]);
    NodePtr n = makeNode(Node::Type::kAlt, at);
    n->kids = std::move(alts);
    return n;
  }

  NodePtr parseConcat(Flags& flags, int depth) {
    NodePtr n = makeNode(Node::Type::kConcat, i_);
    while (more() && peek() != '|' && peek() != ')') {
      NodePtr atom = parseAtom(flags, depth);
      if (!atom) continue;  // a flag setting or a comment
      if (atom->literalRun) {
        // \Q...\E: a quantifier after it repeats only its last character.
        for (std::size_t k = 0; k + 1 < atom->kids.size(); ++k) n->kids.push_back(std::move(atom->kids[k]));
        atom = std::move(atom->kids.back());
      }
      n->kids.push_back(parseQuantifier(std::move(atom)));
    }
    if (n->kids.size() == 1) return std::move(n->kids[0]);
    if (n->kids.empty()) n->type = Node::Type::kEmpty;
    return n;
  }

  // {n}, {n,}, {n,m} at i_: fills min/max and moves past it; false (i_ unmoved)
  // when the brace is not a quantifier (then it is a literal '{', as in PCRE2).
  bool braceQuantifier(int& min, int& max) {
    std::size_t j = i_ + 1;
    auto number = [&](int& out) {
      const std::size_t from = j;
      long v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = v * 10 + (p_[j] - '0');
        if (v > kMaxCount) fail(from, "a repeat count above " + std::to_string(kMaxCount));
        ++j;
      }
      out = static_cast<int>(v);
      return j > from;
    };
    if (!number(min)) return false;
    if (j < p_.size() && p_[j] == '}') {
      max = min;
    } else if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] == '}') {
        max = kUnbounded;
      } else {
        if (!number(max) || j >= p_.size() || p_[j] != '}') return false;
        if (max < min) fail(i_, "a repeat {n,m} with m < n");
      }
    } else {
      return false;
    }
    i_ = j + 1;
    return true;
  }

  bool atQuantifier() {
    const char c = peek();
    if (!more()) return false;
    if (c == '*' || c == '+' || c == '?') return true;
    if (c != '{') return false;
    const std::size_t save = i_;
    int a = 0, b = 0;
    const bool q = braceQuantifier(a, b);
    i_ = save;
    return q;
  }

  NodePtr parseQuantifier(NodePtr atom) {
    if (!atQuantifier()) return atom;
    const std::size_t at = i_;
    int min = 0, max = 0;
    const char c = p_[i_];
    if (c == '{') {
      braceQuantifier(min, max);
    } else {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : kUnbounded;
    }
    Greed greed = Greed::kGreedy;
    if (accept('?'))
      greed = Greed::kLazy;
    else if (accept('+'))
      greed = Greed::kPossessive;
    if (atQuantifier()) fail(i_, "a quantifier follows a quantifier");
    NodePtr n = makeNode(Node::Type::kRepeat, at);
    n->min = min;
    n->max = max;
    n->greed = greed;
    n->kids.push_back(std::move(atom));
    return n;
  }

  NodePtr charNode(char32_t cp, const Flags& flags, std::size_t at) {
    // A letter without case is an ordinary character even when caseless.
    const bool hasCase = flags.caseless && unicode::caseVariants(cp).size() > 1;
    NodePtr n = makeNode(Node::Type::kChar, at);
    n->cp = hasCase ? unicode::simpleFold(cp) : cp;
    n->caseless = hasCase;
    return n;
  }

  NodePtr setNode(CharSet set, const Flags& flags, std::size_t at) {
    set.finish(flags.caseless);
    sets_.push_back(std::move(set));
    NodePtr n = makeNode(Node::Type::kSet, at);
    n->set = static_cast<int>(sets_.size() - 1);
    return n;
  }

  NodePtr anchorNode(Anchor a, std::size_t at) {
    NodePtr n = makeNode(Node::Type::kAnchor, at);
    n->anchor = a;
    return n;
  }

  // Returns null for items that match nothing and leave no node: (?i), (?#...).
  NodePtr parseAtom(Flags& flags, int depth) {
    const std::size_t at = i_;
    const char c = p_[i_];
    switch (c) {
      case '(':
        return parseGroup(flags, depth);
      case '[':
        ++i_;
        return setNode(parseClass(flags), flags, at);
      case '.': {
        ++i_;
        NodePtr n = makeNode(Node::Type::kAny, at);
        n->dotAll = flags.dotAll;
        return n;
      }
      case '^':
        ++i_;
        return anchorNode(flags.multiline ? Anchor::kLineBegin : Anchor::kBegin, at);
      case '$':
        ++i_;
        return anchorNode(flags.multiline ? Anchor::kLineEnd : Anchor::kEnd, at);
      case '*':
      case '+':
      case '?':
        fail(at, std::string("'") + c + "' has nothing to repeat");
      case '{':
        if (atQuantifier()) fail(at, "'{' has nothing to repeat");
        ++i_;
        return charNode('{', flags, at);
      case '\\':
        return parseEscape(flags);
      default:
        return charNode(nextCodePoint(), flags, at);
    }
  }

  NodePtr parseGroup(Flags& flags, int depth) {
    const std::size_t at = i_;
    ++i_;  // '('
    Flags inner = flags;
    NodePtr wrapper;  // atomic or lookahead, else a plain group
    if (accept('*')) fail(at, "backtracking verbs and (*...) options are not supported");
    if (accept('?')) {
      const char k = peek();
      if (k == ':') {
        ++i_;
      } else if (k == '=' || k == '!') {
        ++i_;
        wrapper = makeNode(Node::Type::kLook, at);
        wrapper->negative = k == '!';
      } else if (k == '>') {
        ++i_;
        wrapper = makeNode(Node::Type::kAtomic, at);
      } else if (k == '<' && (peek(1) == '=' || peek(1) == '!')) {
        fail(at, "lookbehind (?<= ) (?<! ) is not supported");
      } else if (k == '<' || k == '\'' || (k == 'P' && peek(1) == '<')) {
        // A named group: the name does not matter here.
        if (k == 'P') ++i_;
        const char close = peek() == '<' ? '>' : '\'';
        ++i_;
        const std::size_t nameAt = i_;
        while (more() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')) ++i_;
        if (i_ == nameAt || !accept(close)) fail(nameAt, "a group name must be letters, digits or _");
      } else if (k == '#') {
        while (more() && peek() != ')') ++i_;
        if (!accept(')')) fail(at, "a comment (?# without its ')'");
        return nullptr;
      } else if (k == 'P' && (peek(1) == '=' || peek(1) == '>')) {
        fail(at, "named backreferences and subroutine calls are not supported");
      } else if (k == 'R' || k == '&' || k == '(' || k == '|' || (k >= '0' && k <= '9') || k == '+') {
        fail(at, "recursion, conditionals and branch reset groups are not supported");
      } else {
        // Flags: (?i) (?-i) (?im-s) alone, or (?i: ... ) around a group.
        bool on = true;
        while (more() && peek() != ')' && peek() != ':') {
          const std::size_t flagAt = i_;
          const char f = p_[i_++];
          if (f == '-' && on) {
            on = false;
          } else if (f == 'i') {
            inner.caseless = on;
          } else if (f == 's') {
            inner.dotAll = on;
          } else if (f == 'm') {
            inner.multiline = on;
          } else {
            fail(flagAt, std::string("the option '") + f + "' is not supported (i, m and s are)");
          }
        }
        if (!more()) fail(at, "missing ')'");
        if (accept(')')) {
          flags = inner;  // (?i) holds to the end of the enclosing group
          return nullptr;
        }
        ++i_;  // ':'
      }
    }
    NodePtr body = parseAlternation(inner, depth + 1);
    if (!accept(')')) fail(at, "missing ')' for the '(' here");
    if (!wrapper) return body;
    wrapper->kids.push_back(std::move(body));
    return wrapper;
  }

  // \x.. \x{..} \o{..} \0dd; i_ is past the letter.
  char32_t numericEscape(char kind, std::size_t at) {
    auto digitValue = [](char d, int base) -> int {
      int v = d >= '0' && d <= '9'   ? d - '0'
              : d >= 'a' && d <= 'f' ? d - 'a' + 10
              : d >= 'A' && d <= 'F' ? d - 'A' + 10
                                     : 99;
      return v < base ? v : -1;
    };
    const int base = kind == 'x' ? 16 : 8;
    char32_t v = 0;
    if ((kind == 'x' || kind == 'o') && accept('{')) {
      const std::size_t from = i_;
      while (more() && peek() != '}') {
        const int d = digitValue(peek(), base);
        if (d < 0) fail(i_, "a bad digit in \\" + std::string(1, kind) + "{...}");
        v = v * static_cast<char32_t>(base) + static_cast<char32_t>(d);
        if (v > 0x10FFFF) fail(at, "a code point above U+10FFFF");
        ++i_;
      }
      if (i_ == from || !accept('}')) fail(at, "\\" + std::string(1, kind) + "{ needs digits and a '}'");
    } else if (kind == 'o') {
      fail(at, "\\o needs braces: \\o{...}");
    } else {
      // \xhh: up to two hex digits; \0dd: up to two more octal digits.
      for (int k = 0; k < 2 && more() && digitValue(peek(), base) >= 0; ++k)
        v = v * static_cast<char32_t>(base) + static_cast<char32_t>(digitValue(p_[i_++], base));
    }
    if (v >= 0xD800 && v < 0xE000) fail(at, "a surrogate code point, which UTF-8 text cannot hold");
    return v;
  }

  // \p{..} \P{..} \pL; i_ is past the p or P.
  void property(CharSet& set, bool negated, std::size_t at) {
    std::string name;
    if (accept('{')) {
      if (accept('^')) negated = !negated;
      while (more() && peek() != '}') name += p_[i_++];
      if (!accept('}')) fail(at, "\\p{ without its '}'");
    } else {
      if (!more()) fail(at, "\\p needs a property name");
      name = std::string(1, p_[i_++]);
    }
    const std::uint32_t mask = categoryMask(name);
    if (mask == 0)
      fail(at, "the Unicode property \"" + name +
                   "\" is not supported (general categories such as L, Lu, N, Nd, P, S, Z, M, C are)");
    if (negated)
      set.notCategories.push_back(mask);
    else
      set.categories |= mask;
  }

  // The escapes that stand for a set (\d \s \w \h \v and their capitals, \p, \P):
  // adds to `set` and returns true; i_ is past the backslash.
  bool setEscape(CharSet& set) {
    const std::size_t at = i_ - 1;
    const char e = peek();
    switch (e) {
      case 'd':
        set.categories |= bit(Category::kNd);
        break;
      case 'D':
        set.notCategories.push_back(bit(Category::kNd));
        break;
      case 's':
        set.shorthands.emplace_back(Shorthand::kSpace, false);
        break;
      case 'S':
        set.shorthands.emplace_back(Shorthand::kSpace, true);
        break;
      case 'w':
        set.shorthands.emplace_back(Shorthand::kWord, false);
        break;
      case 'W':
        set.shorthands.emplace_back(Shorthand::kWord, true);
        break;
      case 'h':
        set.shorthands.emplace_back(Shorthand::kHSpace, false);
        break;
      case 'H':
        set.shorthands.emplace_back(Shorthand::kHSpace, true);
        break;
      case 'v':
        set.shorthands.emplace_back(Shorthand::kVSpace, false);
        break;
      case 'V':
        set.shorthands.emplace_back(Shorthand::kVSpace, true);
        break;
      case 'p':
      case 'P':
        ++i_;
        property(set, e == 'P', at);
        return true;
      default:
        return false;
    }
    ++i_;
    return true;
  }

  // A single-character escape (i_ past the backslash), inside or outside a class.
  char32_t charEscape(bool inClass) {
    const std::size_t at = i_ - 1;
    if (!more()) fail(at, "the pattern ends in a backslash");
    const char e = p_[i_];
    if (!std::isalnum(static_cast<unsigned char>(e))) return nextCodePoint();  // \. \\ \( ... \é
    ++i_;
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'e':
        return 0x1B;
      case 'a':
        return 0x07;
      case 'x':
      case 'o':
        return numericEscape(e, at);
      case '0':
        return numericEscape('0', at);
      case 'b':
        if (inClass) return 0x08;
        break;
      default:
        break;
    }
    if (e >= '1' && e <= '9') fail(at, "backreferences (\\1 ...) are not supported");
    if (e == 'g' || e == 'k') fail(at, "backreferences (\\g, \\k) are not supported");
    if (e == 'c') fail(at, "\\c control escapes are not supported");
    fail(at, std::string("the escape \\") + e + " is not supported" + (inClass ? " inside a character class" : ""));
  }

  NodePtr parseEscape(Flags& flags) {
    const std::size_t at = i_;
    ++i_;  // backslash
    if (!more()) fail(at, "the pattern ends in a backslash");
    CharSet set;
    if (setEscape(set)) return setNode(std::move(set), flags, at);
    switch (peek()) {
      case 'A':
        ++i_;
        return anchorNode(Anchor::kBegin, at);
      case 'z':
        ++i_;
        return anchorNode(Anchor::kTextEnd, at);
      case 'Z':
        ++i_;
        return anchorNode(Anchor::kEnd, at);
      case 'b':
        ++i_;
        return anchorNode(Anchor::kWordBoundary, at);
      case 'B':
        ++i_;
        return anchorNode(Anchor::kNotWordBoundary, at);
      case 'Q': {
        // \Q...\E: everything up to \E (or the end) literally.
        ++i_;
        NodePtr n = makeNode(Node::Type::kConcat, at);
        while (more() && !(peek() == '\\' && peek(1) == 'E')) n->kids.push_back(charNode(nextCodePoint(), flags, i_));
        if (more()) i_ += 2;
        if (n->kids.empty()) return nullptr;
        n->literalRun = true;
        return n;
      }
      case 'E':
        ++i_;
        return nullptr;  // a stray \E, ignored as PCRE2 does
      case 'G':
      case 'K':
      case 'X':
      case 'R':
      case 'C':
      case 'N':
        fail(at, std::string("the escape \\") + peek() + " is not supported");
      default:
        break;
    }
    return charNode(charEscape(false), flags, at);
  }

  // A class after its '['; returns at the closing ']'.
  CharSet parseClass(const Flags& flags) {
    const std::size_t at = i_ - 1;
    CharSet set;
    if (accept('^')) set.negated = true;
    bool first = true;
    for (;;) {
      if (!more()) fail(at, "a character class without its ']'");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      const std::size_t itemAt = i_;
      if (peek() == '[' && (peek(1) == ':' || peek(1) == '.' || peek(1) == '=')) {
        const std::size_t close = p_.find(std::string(1, peek(1)) + "]", i_ + 2);
        if (close != std::string_view::npos && p_.find(']', i_ + 2) == close + 1)
          fail(itemAt, "POSIX classes such as [:alpha:] are not supported");
      }
      char32_t lo = 0;
      if (peek() == '\\') {
        ++i_;
        if (setEscape(set)) {
          if (peek() == '-' && peek(1) != ']' && more()) fail(i_, "a range that starts at a class escape");
          continue;
        }
        if (peek() == 'Q' || peek() == 'E') fail(itemAt, "\\Q...\\E inside a character class is not supported");
        lo = charEscape(true);
      } else {
        lo = nextCodePoint();
      }
      char32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        const std::size_t hiAt = i_;
        if (peek() == '\\') {
          ++i_;
          CharSet probe;
          if (setEscape(probe)) fail(hiAt, "a range that ends at a class escape");
          hi = charEscape(true);
        } else {
          hi = nextCodePoint();
        }
        if (hi < lo) fail(itemAt, "a range out of order");
      }
      set.ranges.emplace_back(lo, hi);
    }
    (void)flags;
    return set;
  }

  std::string_view p_;
  const std::string& where_;
  std::vector<CharSet>& sets_;
  std::size_t i_ = 0;
};

// ---- the program ----

enum class Op : std::uint8_t {
  kChar,          // one code point c
  kCharFold,      // one code point whose simple fold is c
  kSet,           // one code point in sets[set]
  kAny,           // any code point (but \n unless dotAll)
  kRepeat,        // the single item (item, c, set, dotAll) min..max times, greed
  kSplit,         // try x, then y
  kJmp,           // go to x
  kAnchor,        // anchor
  kLoopMark,      // slots[slot] = pos
  kLoopCheck,     // an iteration that matched nothing leaves the loop: go to x
  kAtomicBegin,   // slots[slot] = stack height
  kAtomicEnd,     // drop the stack back to slots[slot]
  kLookBegin,     // slots[slot] = stack height, slots[slot + 1] = pos
  kLookEnd,       // drop the stack to slots[slot], pos = slots[slot + 1]
  kNegLookBegin,  // push "the body failed: go on at x"; slots[slot] = its height
  kNegLookEnd,    // the body matched: drop the stack to slots[slot] and fail
  kMatch,
};

struct Inst {
  Op op = Op::kMatch;
  Op item = Op::kChar;  // kRepeat: what repeats (kChar, kCharFold, kSet, kAny)
  Greed greed = Greed::kGreedy;
  Anchor anchor = Anchor::kBegin;
  bool dotAll = false;
  char32_t c = 0;
  int set = -1;
  int min = 0, max = 0;
  std::uint32_t x = 0, y = 0;
  std::uint32_t slot = 0;
};

class Compiler {
 public:
  Compiler(std::vector<Inst>& prog, const std::string& where, std::size_t& slots)
      : prog_(prog), where_(where), slots_(slots) {}

  void compile(const Node& n) {
    switch (n.type) {
      case Node::Type::kEmpty:
        return;
      case Node::Type::kChar:
      case Node::Type::kSet:
      case Node::Type::kAny:
        emit(single(n), n);
        return;
      case Node::Type::kAnchor: {
        Inst in;
        in.op = Op::kAnchor;
        in.anchor = n.anchor;
        emit(in, n);
        return;
      }
      case Node::Type::kConcat:
        for (const auto& k : n.kids) compile(*k);
        return;
      case Node::Type::kAlt: {
        // split L1, next; L1: a; jmp end; next: split L2, next2; ...; last
        std::vector<std::size_t> jumps;
        for (std::size_t k = 0; k < n.kids.size(); ++k) {
          if (k + 1 < n.kids.size()) {
            const std::size_t split = emit(op(Op::kSplit), n);
            prog_[split].x = here();
            compile(*n.kids[k]);
            jumps.push_back(emit(op(Op::kJmp), n));
            prog_[split].y = here();
          } else {
            compile(*n.kids[k]);
          }
        }
        for (std::size_t j : jumps) prog_[j].x = here();
        return;
      }
      case Node::Type::kAtomic:
        atomic(n, [&] { compile(*n.kids[0]); });
        return;
      case Node::Type::kLook: {
        const std::uint32_t s = newSlots(2);
        if (n.negative) {
          const std::size_t begin = emit(op(Op::kNegLookBegin, s), n);
          compile(*n.kids[0]);
          emit(op(Op::kNegLookEnd, s), n);
          prog_[begin].x = here();
        } else {
          emit(op(Op::kLookBegin, s), n);
          compile(*n.kids[0]);
          emit(op(Op::kLookEnd, s), n);
        }
        return;
      }
      case Node::Type::kRepeat:
        repeat(n);
        return;
    }
  }

  void finish() {
    Inst m;
    m.op = Op::kMatch;
    prog_.push_back(m);
  }

 private:
  std::uint32_t here() const { return static_cast<std::uint32_t>(prog_.size()); }

  static Inst op(Op o, std::uint32_t slot = 0) {
    Inst in;
    in.op = o;
    in.slot = slot;
    return in;
  }

  std::uint32_t newSlots(std::size_t n) {
    const auto s = static_cast<std::uint32_t>(slots_);
    slots_ += n;
    return s;
  }

  std::size_t emit(const Inst& in, const Node& n) {
    if (prog_.size() >= kMaxInstructions)
      throw IoError(where_ + ": the regex pattern does not compile at offset " + std::to_string(n.at) +
                    ": it needs more than " + std::to_string(kMaxInstructions) +
                    " instructions (large {n,m} counts copy what they repeat)");
    prog_.push_back(in);
    return prog_.size() - 1;
  }

  static Inst single(const Node& n) {
    Inst in;
    if (n.type == Node::Type::kChar) {
      in.op = n.caseless ? Op::kCharFold : Op::kChar;
      in.c = n.cp;
    } else if (n.type == Node::Type::kSet) {
      in.op = Op::kSet;
      in.set = n.set;
    } else {
      in.op = Op::kAny;
      in.dotAll = n.dotAll;
    }
    return in;
  }

  template <typename Body>
  void atomic(const Node& n, Body body) {
    const std::uint32_t s = newSlots(1);
    emit(op(Op::kAtomicBegin, s), n);
    body();
    emit(op(Op::kAtomicEnd, s), n);
  }

  void repeat(const Node& n) {
    const Node& kid = *n.kids[0];
    if (n.max == 0) return;  // x{0}
    if (isSingle(kid)) {
      Inst in = single(kid);
      in.item = in.op;
      in.op = Op::kRepeat;
      in.min = n.min;
      in.max = n.max;
      in.greed = n.greed;
      emit(in, n);
      return;
    }
    if (n.greed == Greed::kPossessive) {
      atomic(n, [&] { loop(n, Greed::kGreedy); });
      return;
    }
    loop(n, n.greed);
  }

  void loop(const Node& n, Greed greed) {
    const Node& kid = *n.kids[0];
    for (int k = 0; k < n.min; ++k) compile(kid);
    if (n.max == kUnbounded) {
      // top: split body, out (lazy: out, body); body: [mark] kid [check out]; jmp top; out:
      const bool guard = canBeEmpty(kid);
      const std::uint32_t s = guard ? newSlots(1) : 0;
      const std::uint32_t top = here();
      const std::size_t split = emit(op(Op::kSplit), n);
      const std::uint32_t body = here();
      if (guard) emit(op(Op::kLoopMark, s), n);
      compile(kid);
      const std::size_t check = guard ? emit(op(Op::kLoopCheck, s), n) : 0;
      Inst back = op(Op::kJmp);
      back.x = top;
      emit(back, n);
      const std::uint32_t out = here();
      prog_[split].x = greed == Greed::kLazy ? out : body;
      prog_[split].y = greed == Greed::kLazy ? body : out;
      if (guard) prog_[check].x = out;
      return;
    }
    // (max - min) optional copies, each one only tried after the one before matched.
    std::vector<std::size_t> splits;
    for (int k = n.min; k < n.max; ++k) {
      splits.push_back(emit(op(Op::kSplit), n));
      prog_[splits.back()].x = here();
      compile(kid);
    }
    const std::uint32_t out = here();
    for (std::size_t sp : splits) {
      const std::uint32_t body = prog_[sp].x;
      prog_[sp].x = greed == Greed::kLazy ? out : body;
      prog_[sp].y = greed == Greed::kLazy ? body : out;
    }
  }

  std::vector<Inst>& prog_;
  const std::string& where_;
  std::size_t& slots_;
};

// ---- the machine ----

enum class FrameKind : std::uint8_t {
  kRetry,     // go on at pc, pos
  kRestore,   // slots[pc] = aux
  kGiveBack,  // a greedy repeat gives back one code point (down to aux), then goes on at pc
  kTakeMore,  // a lazy repeat (the kRepeat at pc) takes one more code point; aux counts them
  kNegLook,   // the body of a negative lookahead failed: go on at pc, pos
};

struct Frame {
  FrameKind kind;
  std::uint32_t pc;
  std::size_t pos;
  std::size_t aux;
};

class Machine {
 public:
  Machine(const std::vector<Inst>& prog, const std::vector<CharSet>& sets, std::size_t slots, std::string_view text,
          std::size_t budget, const std::string& where)
      : prog_(prog), sets_(sets), slots_(slots, 0), text_(text), budget_(budget), where_(where) {}

  // Runs the program anchored at `start`; the end of the match, or npos.
  std::size_t matchAt(std::size_t start) {
    stack_.clear();
    std::uint32_t pc = 0;
    std::size_t pos = start;
    for (;;) {
      count(1);
      const Inst& in = prog_[pc];
      bool ok = true;
      switch (in.op) {
        case Op::kChar:
        case Op::kCharFold:
        case Op::kSet:
        case Op::kAny: {
          const int n = one(in.op, in, pos);
          if (n == 0) {
            ok = false;
            break;
          }
          pos += static_cast<std::size_t>(n);
          ++pc;
          break;
        }
        case Op::kRepeat:
          ok = repeat(in, pc, pos);
          break;
        case Op::kSplit:
          stack_.push_back({FrameKind::kRetry, in.y, pos, 0});
          pc = in.x;
          break;
        case Op::kJmp:
          pc = in.x;
          break;
        case Op::kAnchor:
          ok = anchor(in.anchor, pos);
          ++pc;
          break;
        case Op::kLoopMark:
          setSlot(in.slot, pos);
          ++pc;
          break;
        case Op::kLoopCheck:
          pc = slots_[in.slot] == pos ? in.x : pc + 1;
          break;
        case Op::kAtomicBegin:
          setSlot(in.slot, 0);
          slots_[in.slot] = stack_.size();  // above the restore, which the cut keeps
          ++pc;
          break;
        case Op::kAtomicEnd:
          stack_.resize(slots_[in.slot]);
          ++pc;
          break;
        case Op::kLookBegin:
          setSlot(in.slot, stack_.size());
          setSlot(in.slot + 1, pos);
          // The two restores sit below the height kept, so they survive the cut.
          slots_[in.slot] = stack_.size();
          ++pc;
          break;
        case Op::kLookEnd:
          stack_.resize(slots_[in.slot]);
          pos = slots_[in.slot + 1];
          ++pc;
          break;
        case Op::kNegLookBegin:
          setSlot(in.slot, 0);
          slots_[in.slot] = stack_.size();
          stack_.push_back({FrameKind::kNegLook, in.x, pos, 0});
          ++pc;
          break;
        case Op::kNegLookEnd:
          stack_.resize(slots_[in.slot]);
          ok = false;
          break;
        case Op::kMatch:
          return pos;
      }
      if (ok) continue;
      if (!backtrack(pc, pos)) return std::string_view::npos;
    }
  }

 private:
  void count(std::size_t n) {
    steps_ += n;
    if (steps_ > budget_)
      throw Error(where_ + ": the regex pattern gave up after " + std::to_string(budget_) + " steps on a text of " +
                  std::to_string(text_.size()) + " bytes (it backtracks too much on this text)");
  }

  void setSlot(std::uint32_t s, std::size_t v) {
    stack_.push_back({FrameKind::kRestore, s, 0, slots_[s]});
    slots_[s] = v;
  }

  // The length of the code point at pos when `item` matches it, else 0.
  int one(Op item, const Inst& in, std::size_t pos) const {
    if (pos >= text_.size()) return 0;
    char32_t c = 0;
    const int n = decodeAt(text_, pos, c);
    if (n == 0) return 0;
    switch (item) {
      case Op::kChar:
        return c == in.c ? n : 0;
      case Op::kCharFold:
        return unicode::simpleFold(c) == in.c ? n : 0;
      case Op::kSet:
        return sets_[static_cast<std::size_t>(in.set)].contains(c) ? n : 0;
      case Op::kAny:
        return (in.dotAll || c != '\n') ? n : 0;
      default:
        return 0;
    }
  }

  bool repeat(const Inst& in, std::uint32_t& pc, std::size_t& pos) {
    const std::size_t max =
        in.max == kUnbounded ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(in.max);
    const auto min = static_cast<std::size_t>(in.min);
    std::size_t n = 0, p = pos;
    // The mandatory part, and for greedy and possessive repeats as much as fits.
    const std::size_t want = in.greed == Greed::kLazy ? min : max;
    std::size_t minEnd = pos;
    while (n < want) {
      const int len = one(in.item, in, p);
      if (len == 0) break;
      p += static_cast<std::size_t>(len);
      ++n;
      if (n == min) minEnd = p;
    }
    count(n);
    if (n < min) return false;
    if (in.greed == Greed::kGreedy && p > minEnd) stack_.push_back({FrameKind::kGiveBack, pc + 1, p, minEnd});
    if (in.greed == Greed::kLazy && n < max) stack_.push_back({FrameKind::kTakeMore, pc, p, n});
    pos = p;
    ++pc;
    return true;
  }

  bool wordBefore(std::size_t pos) const {
    char32_t c = 0;
    return pos > 0 && decodeBefore(text_, pos, c) && isWordUcp(c, unicode::category(c));
  }
  bool wordAt(std::size_t pos) const {
    char32_t c = 0;
    return pos < text_.size() && decodeAt(text_, pos, c) > 0 && isWordUcp(c, unicode::category(c));
  }

  bool anchor(Anchor a, std::size_t pos) const {
    const std::size_t n = text_.size();
    switch (a) {
      case Anchor::kBegin:
        return pos == 0;
      case Anchor::kLineBegin:
        return pos == 0 || (text_[pos - 1] == '\n' && pos < n);
      case Anchor::kEnd:
        return pos == n || (pos + 1 == n && text_[pos] == '\n');
      case Anchor::kLineEnd:
        return pos == n || text_[pos] == '\n';
      case Anchor::kTextEnd:
        return pos == n;
      case Anchor::kWordBoundary:
        return wordBefore(pos) != wordAt(pos);
      case Anchor::kNotWordBoundary:
        return wordBefore(pos) == wordAt(pos);
    }
    return false;
  }

  // Pops frames until one gives a way on (pc, pos); false when none is left.
  bool backtrack(std::uint32_t& pc, std::size_t& pos) {
    while (!stack_.empty()) {
      count(1);
      Frame& f = stack_.back();
      switch (f.kind) {
        case FrameKind::kRetry:
        case FrameKind::kNegLook:
          pc = f.pc;
          pos = f.pos;
          stack_.pop_back();
          return true;
        case FrameKind::kRestore:
          slots_[f.pc] = f.aux;
          stack_.pop_back();
          break;
        case FrameKind::kGiveBack: {
          // Everything the repeat took is valid UTF-8: step back to a lead byte.
          std::size_t p = f.pos - 1;
          while ((static_cast<unsigned char>(text_[p]) & 0xC0) == 0x80) --p;
          pc = f.pc;
          pos = p;
          if (p > f.aux)
            f.pos = p;
          else
            stack_.pop_back();
          return true;
        }
        case FrameKind::kTakeMore: {
          const Inst& in = prog_[f.pc];
          const int len = one(in.item, in, f.pos);
          if (len == 0) {
            stack_.pop_back();
            break;
          }
          f.pos += static_cast<std::size_t>(len);
          ++f.aux;
          pc = f.pc + 1;
          pos = f.pos;
          if (in.max != kUnbounded && f.aux >= static_cast<std::size_t>(in.max)) stack_.pop_back();
          return true;
        }
      }
    }
    return false;
  }

  const std::vector<Inst>& prog_;
  const std::vector<CharSet>& sets_;
  std::vector<std::size_t> slots_;
  std::string_view text_;
  std::vector<Frame> stack_;
  std::size_t steps_ = 0;
  std::size_t budget_;
  const std::string& where_;
};

}  // namespace

struct Regex::Impl {
  std::string where;
  std::vector<CharSet> sets;
  std::vector<Inst> prog;
  std::size_t slots = 0;
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  impl_->where = where;
  NodePtr tree = Parser(pattern, impl_->where, impl_->sets).parse();
  Compiler compiler(impl_->prog, impl_->where, impl_->slots);
  compiler.compile(*tree);
  compiler.finish();
}

Regex::~Regex() = default;

std::size_t Regex::stepBudget(std::size_t bytes) { return kBaseSteps + kStepsPerByte * bytes; }

std::vector<std::pair<std::size_t, std::size_t>> Regex::findAll(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  Machine m(impl_->prog, impl_->sets, impl_->slots, text, stepBudget(text.size()), impl_->where);
  // The next start: one byte on, then past continuation bytes (a match never
  // starts inside a UTF-8 sequence).
  auto nextChar = [&](std::size_t i) {
    ++i;
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  std::size_t offset = 0;
  while (offset <= text.size()) {
    // The leftmost start at or after offset where the program matches.
    std::size_t begin = offset, end = std::string_view::npos;
    for (;;) {
      end = m.matchAt(begin);
      if (end != std::string_view::npos || begin >= text.size()) break;
      begin = nextChar(begin);
    }
    if (end == std::string_view::npos) break;
    if (end > begin) {
      out.emplace_back(begin, end);
      offset = end;
    } else {
      // An empty match: step over one character so the search moves on.
      if (end >= text.size()) break;
      offset = nextChar(end);
    }
  }
  return out;
}

}  // namespace strata::text
