#include "text/ByteLevel.h"

#include <unordered_map>

#include "text/Unicode.h"

namespace strata::text::bytelevel {
namespace {

struct Tables {
  std::array<std::string, 256> chars;
  std::array<char32_t, 256> codePoints{};
  std::unordered_map<char32_t, unsigned char> bytes;

  Tables() {
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + shifted++);
      codePoints[b] = cp;
      unicode::appendUtf8(chars[b], cp);
      bytes[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& charOf(unsigned char byte) { return tables().chars[byte]; }

std::string encode(std::string_view raw) {
  const Tables& t = tables();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += t.chars[static_cast<unsigned char>(c)];
  return out;
}

std::optional<unsigned char> byteOf(char32_t cp) {
  const Tables& t = tables();
  auto it = t.bytes.find(cp);
  if (it == t.bytes.end()) return std::nullopt;
  return it->second;
}

}  // namespace strata::text::bytelevel
