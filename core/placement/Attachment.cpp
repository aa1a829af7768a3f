#include "placement/Attachment.h"

#include <algorithm>
#include <deque>
#include <mutex>

#include "common/Error.h"

namespace strata::placement {

namespace {

struct KindRegistry {
  std::mutex mutex;
  std::deque<std::string> names;  // a deque keeps the addresses the kinds point at
};

KindRegistry& registry() {
  static KindRegistry r;  // built on first use: kinds may be registered during static initialisation
  return r;
}

bool validName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

AttachmentKind AttachmentKind::registered(const std::string& name) {
  if (!validName(name))
    throw PlacementError("attachment kind '" + name + "': expected a lower_snake_case name (a-z, 0-9, _)");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& n : r.names)
    if (n == name) return AttachmentKind(&n);
  r.names.push_back(name);
  return AttachmentKind(&r.names.back());
}

std::vector<AttachmentKind> AttachmentKind::all() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<AttachmentKind> out;
  for (const auto& n : r.names) out.push_back(AttachmentKind(&n));
  return out;
}

}  // namespace strata::placement
