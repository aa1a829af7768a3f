#pragma once
// "[3072, 64]": a shape for error messages (std::vector<int64_t>, at::IntArrayRef, ...).
#include <cstdint>
#include <string>

namespace strata {

template <typename Dims>
std::string shapeText(const Dims& dims) {
  std::string out = "[";
  bool first = true;
  for (const int64_t d : dims) {
    out += (first ? "" : ", ") + std::to_string(d);
    first = false;
  }
  return out + "]";
}

}  // namespace strata
