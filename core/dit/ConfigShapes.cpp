#include "dit/ConfigShapes.h"

#include <algorithm>
#include <regex>

#include "common/Error.h"
#include "common/ShapeText.h"

namespace strata::dit {

void requireStackBounds(const std::string& who, const std::vector<Bound>& stack, const std::vector<Bound>& extra,
                        const std::vector<int64_t>& axesDimsRope) {
  for (const auto* list : {&stack, &extra})
    for (const auto& [key, value, most] : *list) io::requireAtMost(who, key, value, most);
  io::requireAtMost(who, "axes_dims_rope (entries)", static_cast<int64_t>(axesDimsRope.size()), 8);
  for (auto a : axesDimsRope) io::requireAtMost(who, "an axes_dims_rope entry", a, io::limits::kWidth);
}

void requireRotaryAxes(const std::string& who, const std::vector<int64_t>& axesDimsRope, int64_t attentionHeadDim) {
  auto require = [&who](bool ok, const std::string& what) {
    if (!ok) throw ConfigError(who + ": " + what);
  };
  require(!axesDimsRope.empty(), "axes_dims_rope is empty");
  int64_t sum = 0;
  for (auto a : axesDimsRope) {
    require(a > 0 && a % 2 == 0, "axes_dims_rope entries must be even and positive, got " + shapeText(axesDimsRope));
    sum += a;
  }
  require(sum == attentionHeadDim, "axes_dims_rope " + shapeText(axesDimsRope) + " sums to " + std::to_string(sum) +
                                       ", attention_head_dim is " + std::to_string(attentionHeadDim));
}

ShapeReader::ShapeReader(const std::map<std::string, std::vector<int64_t>>& shapes, std::string who)
    : shapes_(shapes), who_(std::move(who)) {}

const std::vector<int64_t>& ShapeReader::shapeOf(const std::string& key, size_t rank) const {
  auto it = shapes_.find(key);
  if (it == shapes_.end())
    throw LoadError(who_ + ": the checkpoint has no '" + key + "' (needed to detect the architecture)");
  if (it->second.size() != rank)
    throw LoadError(who_ + ": '" + key + "' has shape " + shapeText(it->second) + ", expected rank " +
                    std::to_string(rank));
  return it->second;
}

int64_t ShapeReader::countBlocks(const std::string& prefix) const {
  const std::regex re("^" + prefix + "\\.([0-9]+)\\.");
  int64_t n = 0;
  std::smatch m;
  for (const auto& [key, _] : shapes_)
    if (std::regex_search(key, m, re)) {
      // Bounded before it counts: "blocks.99999999999999999999." is not a number stoll takes.
      if (m[1].length() > 6)
        throw LoadError(who_ + ": the checkpoint's key '" + key + "' has a block index beyond " +
                        std::to_string(io::limits::kLayers) + " (a corrupt header?)");
      n = std::max<int64_t>(n, std::stoll(m[1].str()) + 1);
    }
  return n;
}

}  // namespace strata::dit
