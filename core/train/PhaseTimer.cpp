#include "train/PhaseTimer.h"

#include <algorithm>

#include "device/DeviceInventory.h"

namespace strata::train {

void PhaseTimer::sync() const {
  for (int i : cuda_) device::synchronize(i);
}

void PhaseTimer::beginStep() {
  sync();
  current_.clear();
  last_ = std::chrono::steady_clock::now();
}

void PhaseTimer::mark(const std::string& name) {
  sync();
  const auto now = std::chrono::steady_clock::now();
  current_[name] += std::chrono::duration<double, std::milli>(now - last_).count();
  last_ = now;
  int64_t bytes = 0;
  for (int i : cuda_) bytes += device::memoryFigures(i).allocatedBytes;
  allocated_[name] = bytes;
  if (std::find(order_.begin(), order_.end(), name) == order_.end()) order_.push_back(name);
}

void PhaseTimer::endStep() {
  // Every known phase gets a value for this step, so the lists stay aligned by step.
  for (const auto& name : order_) {
    auto& v = steps_[name];
    v.resize(stepCount_, 0.0);
    const auto it = current_.find(name);
    v.push_back(it == current_.end() ? 0.0 : it->second);
  }
  ++stepCount_;
  current_.clear();
}

int64_t PhaseTimer::allocatedAfter(const std::string& name) const {
  const auto it = allocated_.find(name);
  return it == allocated_.end() ? 0 : it->second;
}

double PhaseTimer::medianMs(const std::string& name, size_t skip) const {
  const auto it = steps_.find(name);
  if (it == steps_.end()) return 0.0;
  std::vector<double> v;
  for (size_t i = skip; i < it->second.size(); ++i) v.push_back(it->second[i]);
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace strata::train
