#include "io/StrictLoad.h"

#include <torch/autograd.h>

#include <set>
#include <sstream>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/TorchCompat.h"

namespace strata::io {

namespace {

[[noreturn]] void fail(const SafetensorsCheckpoint& ckpt, const std::string& label,
                       const std::vector<std::string>& problems) {
  std::ostringstream os;
  os << ckpt.describe() << " (" << label << "): " << problems.size() << " problem(s), nothing loaded";
  for (const auto& p : problems) os << "\n  " << p;
  throw LoadError(os.str());
}

}  // namespace

namespace {

// The checks of loadStrict over (key, shape) pairs in the plan's order.
std::vector<std::string> check(const SafetensorsCheckpoint& ckpt,
                               const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected,
                               const std::map<std::string, std::string>& ignoredKeys, const std::string& label) {
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const auto& [key, shape] : expected) {
    if (!wanted.insert(key).second) throw Error("loadStrict: the plan names '" + key + "' twice");
    auto it = ckpt.shapes().find(key);
    if (it == ckpt.shapes().end()) {
      problems.push_back("missing: " + key + " " + shapeText(shape));
    } else if (it->second != shape) {
      problems.push_back("mis-shaped: " + key + " expected " + shapeText(shape) + ", got " + shapeText(it->second));
    } else {
      const auto dtype = ckpt.info(key).dtype;
      if (dtype != SafetensorsDtype::F64 && dtype != SafetensorsDtype::F32 && dtype != SafetensorsDtype::F16 &&
          dtype != SafetensorsDtype::BF16 && dtype != SafetensorsDtype::F8_E4M3 && dtype != SafetensorsDtype::F8_E5M2)
        problems.push_back("not floating point: " + key + " (" + std::string(dtypeName(dtype)) + ")");
      else if ((dtype == SafetensorsDtype::F8_E4M3 || dtype == SafetensorsDtype::F8_E5M2) && !compat::kHasFloat8)
        problems.push_back("float8 needs LibTorch 2.1 or newer: " + key + " (" + std::string(dtypeName(dtype)) + ")");
    }
  }
  std::vector<std::string> ignored;
  for (const auto& [key, shape] : ckpt.shapes()) {
    if (wanted.count(key)) continue;
    auto why = ignoredKeys.find(key);
    if (why != ignoredKeys.end())
      ignored.push_back(key + ": " + why->second);
    else
      problems.push_back("unexpected: " + key + " " + shapeText(shape));
  }
  if (!problems.empty()) fail(ckpt, label, problems);
  return ignored;
}

}  // namespace

std::vector<std::string> checkStrict(const SafetensorsCheckpoint& ckpt,
                                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected,
                                     const std::map<std::string, std::string>& ignored, const std::string& label) {
  return check(ckpt, expected, ignored, label);
}

std::vector<std::string> loadStrict(const SafetensorsCheckpoint& ckpt, const WeightPlan& plan,
                                    const std::string& label) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  for (const auto& slot : plan.slots) expected.emplace_back(slot.key, slot.target.sizes().vec());
  auto ignored = check(ckpt, expected, plan.ignored, label);
  // Verified: copy, converting dtype and device into each target.
  at::NoGradGuard noGrad;
  for (const auto& slot : plan.slots) {
    at::Tensor target = slot.target;
    target.copy_(ckpt.tensor(slot.key));
  }
  return ignored;
}

StreamedFill::StreamedFill(const SafetensorsCheckpoint& ckpt,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& layout, std::string who,
                           std::function<std::string(const std::string&)> fileKey)
    : ckpt_(ckpt), shapeOf_(layout.begin(), layout.end()), who_(std::move(who)), fileKey_(std::move(fileKey)) {}

void StreamedFill::fill(torch::nn::Module& module, const std::string& prefix) {
  at::NoGradGuard noGrad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string name = prefix + item.key();
    if (filled_.count(name)) continue;
    auto it = shapeOf_.find(name);
    if (it == shapeOf_.end() || it->second != item.value().sizes().vec())
      throw Error(who_ + ": model parameter '" + name + "' is not in the layout");
    const std::string key = fileKey_ ? fileKey_(name) : name;
    item.value().copy_(ckpt_.tensor(key));
    ckpt_.releasePages(key);  // copied out: its file pages need not stay resident
    filled_.insert(name);
  }
}

void StreamedFill::requireComplete() const {
  if (filled_.size() != shapeOf_.size())
    throw Error(who_ + ": the model has " + std::to_string(filled_.size()) + " of the layout's " +
                std::to_string(shapeOf_.size()) + " parameters");
}

}  // namespace strata::io
