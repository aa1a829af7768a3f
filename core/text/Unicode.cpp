#include "text/Unicode.h"

#include <algorithm>
#include <iterator>

namespace strata::text::unicode {
namespace {

struct CategoryRun {
  char32_t start;
  std::uint8_t cat;
};
struct FoldEntry {
  char32_t cp;
  char32_t fold;
};
struct CombiningRun {
  char32_t start;
  std::uint8_t ccc;
};
struct LowerEntry {
  char32_t cp;
  char32_t lower[3];
};
struct Decomposition {
  char32_t cp;
  char32_t first;
  char32_t second;  // 0 for a singleton
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composed;
};

#include "text/UnicodeTables.inc"

// Hangul syllables compose and decompose by arithmetic, not by table.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

template <typename Run>
const Run& runOf(const Run* begin, const Run* end, char32_t cp) {
  const Run* it = std::upper_bound(begin, end, cp, [](char32_t c, const Run& r) { return c < r.start; });
  return *(it - 1);
}

void decomposeInto(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decomposeInto(it->first, out);
  if (it->second != 0) decomposeInto(it->second, out);
}

char32_t composePair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::make_pair(a, b),
                                    [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                                      return c.first != k.first ? c.first < k.first : c.second < k.second;
                                    });
  if (it != end && it->first == a && it->second == b) return it->composed;
  return 0;
}

// The Basic Multilingual Plane, where nearly all text lives, one byte per code point
// (64 KiB, built on first use); the planes above go through the runs.
struct BmpCategories {
  std::uint8_t cat[0x10000];
  BmpCategories() {
    const auto* run = std::begin(kCategoryRuns);
    const auto* end = std::end(kCategoryRuns);
    for (char32_t cp = 0; cp < 0x10000; ++cp) {
      while (run + 1 != end && (run + 1)->start <= cp) ++run;
      cat[cp] = run->cat;
    }
  }
};

// (fold, code point) for every code point that folds to another, sorted: the
// inverse of kSimpleFolds, for caseVariants.
std::vector<std::pair<char32_t, char32_t>> buildUnfolds() {
  std::vector<std::pair<char32_t, char32_t>> out;
  for (const FoldEntry& e : kSimpleFolds) out.emplace_back(e.fold, e.cp);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Category category(char32_t cp) {
  if (cp < 0x10000) {
    static const BmpCategories bmp;
    return static_cast<Category>(bmp.cat[cp]);
  }
  if (cp >= 0x110000) return Category::kCn;
  return static_cast<Category>(runOf(std::begin(kCategoryRuns), std::end(kCategoryRuns), cp).cat);
}

CharClass charClass(char32_t cp) {
  switch (category(cp)) {
    case Category::kLu:
    case Category::kLl:
    case Category::kLt:
    case Category::kLm:
    case Category::kLo:
      return CharClass::kLetter;
    case Category::kMn:
    case Category::kMc:
    case Category::kMe:
      return CharClass::kMark;
    case Category::kNd:
    case Category::kNl:
    case Category::kNo:
      return CharClass::kNumber;
    case Category::kPc:
    case Category::kPd:
    case Category::kPs:
    case Category::kPe:
    case Category::kPi:
    case Category::kPf:
    case Category::kPo:
      return CharClass::kPunct;
    case Category::kSm:
    case Category::kSc:
    case Category::kSk:
    case Category::kSo:
      return CharClass::kSymbol;
    case Category::kZs:
      return CharClass::kSpaceSep;
    case Category::kZl:
    case Category::kZp:
      return CharClass::kLineSep;
    default:
      return CharClass::kOther;
  }
}

char32_t simpleFold(char32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  const auto* end = std::end(kSimpleFolds);
  const auto* it =
      std::lower_bound(std::begin(kSimpleFolds), end, cp, [](const FoldEntry& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->fold : cp;
}

const std::u32string& casedCodePoints() {
  static const std::u32string all = [] {
    std::u32string s;
    for (const FoldEntry& e : kSimpleFolds) {
      s.push_back(e.cp);
      s.push_back(e.fold);
    }
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
  }();
  return all;
}

std::u32string caseVariants(char32_t cp) {
  static const std::vector<std::pair<char32_t, char32_t>> unfolds = buildUnfolds();
  const char32_t f = simpleFold(cp);
  std::u32string out{f};
  auto it = std::lower_bound(unfolds.begin(), unfolds.end(), std::make_pair(f, char32_t{0}));
  for (; it != unfolds.end() && it->first == f; ++it) out.push_back(it->second);
  std::sort(out.begin(), out.end());
  return out;
}

int combiningClass(char32_t cp) {
  if (cp < 0x300 || cp >= 0x110000) return 0;
  return runOf(std::begin(kCombiningRuns), std::end(kCombiningRuns), cp).ccc;
}

bool isSpace(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85) return true;
  if (cp < 0x80) return false;
  const CharClass c = charClass(cp);
  return c == CharClass::kSpaceSep || c == CharClass::kLineSep;
}

bool isCjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::size_t utf8Length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 1;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

std::u32string decodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    const std::size_t n = utf8Length(s, i);
    if (n == 1) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = b & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    // Overlong forms and surrogates are invalid too.
    const char32_t minForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < minForLength[n] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encodeUtf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) appendUtf8(out, cp);
  return out;
}

std::u32string toLower(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
      continue;
    }
    const auto* end = std::end(kLowerMap);
    const auto* it =
        std::lower_bound(std::begin(kLowerMap), end, cp, [](const LowerEntry& e, char32_t c) { return e.cp < c; });
    if (it == end || it->cp != cp) {
      out.push_back(cp);
      continue;
    }
    for (char32_t l : it->lower)
      if (l != 0) out.push_back(l);
  }
  return out;
}

std::string toLower(std::string_view utf8) {
  if (std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    std::string out(utf8);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
  }
  return encodeUtf8(toLower(decodeUtf8(utf8)));
}

std::u32string nfc(const std::u32string& s) {
  // Below U+0300 every string is already NFC (no marks, no exclusions).
  if (std::all_of(s.begin(), s.end(), [](char32_t c) { return c < 0x300; })) return s;
  std::u32string d;
  d.reserve(s.size() + 8);
  for (char32_t cp : s) decomposeInto(cp, d);
  // Canonical order: stable sort of every run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combiningClass(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combiningClass(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combiningClass(a) < combiningClass(b); });
    i = j;
  }
  // Canonical composition.
  std::u32string out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  int lastCcc = -1;
  for (char32_t cp : d) {
    const int ccc = combiningClass(cp);
    if (starter >= 0) {
      const bool blocked = lastCcc != -1 && (lastCcc == 0 || lastCcc >= ccc);
      if (!blocked) {
        if (char32_t composed = composePair(out[static_cast<std::size_t>(starter)], cp)) {
          out[static_cast<std::size_t>(starter)] = composed;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      lastCcc = -1;
    } else {
      lastCcc = ccc;
    }
    out.push_back(cp);
  }
  return out;
}

std::string nfc(std::string_view utf8) {
  if (std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; }))
    return std::string(utf8);
  return encodeUtf8(nfc(decodeUtf8(utf8)));
}

const char* tableVersion() { return kUnicodeVersion; }

}  // namespace strata::text::unicode
