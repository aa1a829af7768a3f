#pragma once
// GPT-2's byte-to-character map: every byte gets a printable character (the
// printable Latin-1 bytes themselves, the rest shifted to U+0100..), so byte-level
// BPE works on strings of visible characters. Space becomes 'Ġ', newline 'Ċ'.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace strata::text::bytelevel {

// The character (as UTF-8) that stands for `byte`.
const std::string& charOf(unsigned char byte);
// Every byte of `raw` mapped to its character, as UTF-8.
std::string encode(std::string_view raw);
// The byte a code point stands for, or nothing when it is not one of the 256.
std::optional<unsigned char> byteOf(char32_t cp);

}  // namespace strata::text::bytelevel
