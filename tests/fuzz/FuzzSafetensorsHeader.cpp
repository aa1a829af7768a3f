// libFuzzer target for the safetensors header parser (bytes in, header out; no
// files). The parser may reject input only with strata::IoError; any other
// exception escapes and libFuzzer reports it, as it does crashes and leaks.
//   strata_fuzz_safetensors_header -dict=safetensors.dict corpus/
#include <cstddef>
#include <cstdint>

#include "common/Error.h"
#include "io/Safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto header = strata::io::parseSafetensorsHeader(data, size, "fuzz-input");
    // Accepted headers must describe spans a reader can trust.
    for (const auto& [name, info] : header.tensors) {
      if (info.endBytes > header.dataSizeBytes || info.beginBytes > info.endBytes) __builtin_trap();
      if (static_cast<std::uint64_t>(info.numel()) * strata::io::dtypeSizeBytes(info.dtype) != info.sizeBytes())
        __builtin_trap();
    }
  } catch (const strata::IoError&) {
  }
  return 0;
}
