#include "device/CardPeaks.h"

#include <cctype>
#include <utility>
#include <vector>

namespace strata::device {

namespace {

// "NVIDIA A100-SXM4-80GB" -> {nvidia, a100, sxm4, 80gb}.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char c : text) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

bool containsRun(const std::vector<std::string>& name, const std::vector<std::string>& part) {
  if (part.empty() || part.size() > name.size()) return false;
  for (size_t i = 0; i + part.size() <= name.size(); ++i) {
    size_t k = 0;
    while (k < part.size() && name[i + k] == part[k]) ++k;
    if (k == part.size()) return true;
  }
  return false;
}

}  // namespace

std::optional<double> denseBf16PeakTflops(const std::string& cardName) {
  // NVIDIA's data sheets, BF16 tensor core, dense (without sparsity): H100 SXM 989
  // (1979 sparse), H100 PCIe 756 (1513), L40S 362 (733), L40 181 (362), L4 121 (242).
  // H200 SXM is the H100 SXM's compute. An A100 is 312 as SXM and PCIe.
  static const std::vector<std::pair<const char*, std::optional<double>>> kPeaks = {{"H200", 989.0},
                                                                                    {"H200 NVL", std::nullopt},
                                                                                    {"H100", 989.0},
                                                                                    {"H100 PCIe", 756.0},
                                                                                    {"H100 NVL", std::nullopt},
                                                                                    {"A100", 312.0},
                                                                                    {"L40S", 362.0},
                                                                                    {"L40", 181.0},
                                                                                    {"L4", 121.0},
                                                                                    {"RTX 4090", 165.0},
                                                                                    {"RTX 3090", 71.0},
                                                                                    {"A10", 125.0}};
  const auto name = words(cardName);
  const std::pair<const char*, std::optional<double>>* best = nullptr;
  size_t bestWords = 0;
  for (const auto& entry : kPeaks) {
    const auto part = words(entry.first);
    if (part.size() > bestWords && containsRun(name, part)) {
      best = &entry;
      bestWords = part.size();
    }
  }
  return best ? best->second : std::nullopt;
}

}  // namespace strata::device
