#pragma once
// Minimal protobuf writer: the wire format of the few fields a sentencepiece
// ModelProto needs (used to run a Unigram tokenizer.json through sentencepiece).
#include <cstdint>
#include <cstring>
#include <string>

namespace strata::text {

class ProtoWriter {
 public:
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void intField(int field, std::int64_t v) {
    varint(static_cast<std::uint64_t>(field) << 3);
    varint(static_cast<std::uint64_t>(v));  // negative ints: 10-byte two's complement, as protobuf does
  }
  void bytesField(int field, const std::string& bytes) {
    varint((static_cast<std::uint64_t>(field) << 3) | 2);
    varint(bytes.size());
    out_ += bytes;
  }
  void floatField(int field, float v) {
    varint((static_cast<std::uint64_t>(field) << 3) | 5);
    char b[4];
    std::memcpy(b, &v, 4);  // little-endian hosts only (x86-64, aarch64)
    out_.append(b, 4);
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace strata::text
