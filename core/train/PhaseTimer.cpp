#include "train/PhaseTimer.h"

#include <algorithm>

#include "device/DeviceInventory.h"

namespace strata::train {

void PhaseTimer::sync() const {
  for (int i : cuda_) device::synchronize(i);
}

void PhaseTimer::setDevices(std::vector<int> cudaIndices) {
  cuda_ = cudaIndices;
  peaks_ = device::PeakMemoryWindows(std::move(cudaIndices));
}

void PhaseTimer::beginStep() {
  sync();
  peaks_.take();  // what came before the step (loading, the last step's report) counts for the run only
  current_.clear();
  currentPeak_.clear();
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
  auto& peak = currentPeak_[name];
  peak = std::max(peak, peaks_.take());
  if (std::find(order_.begin(), order_.end(), name) == order_.end()) order_.push_back(name);
}

void PhaseTimer::endStep() {
  // Every known phase gets a value for this step, so the lists stay aligned by step.
  for (const auto& name : order_) {
    auto& v = steps_[name];
    v.resize(stepCount_, 0.0);
    const auto it = current_.find(name);
    v.push_back(it == current_.end() ? 0.0 : it->second);
    auto& peaks = stepPeaks_[name];
    peaks.resize(stepCount_, 0);
    const auto pit = currentPeak_.find(name);
    peaks.push_back(pit == currentPeak_.end() ? 0 : pit->second);
  }
  ++stepCount_;
  current_.clear();
  currentPeak_.clear();
}

int64_t PhaseTimer::allocatedAfter(const std::string& name) const {
  const auto it = allocated_.find(name);
  return it == allocated_.end() ? 0 : it->second;
}

int64_t PhaseTimer::peakDuring(const std::string& name, size_t skip) const {
  const auto it = stepPeaks_.find(name);
  if (it == stepPeaks_.end() || it->second.size() <= skip) return 0;
  return *std::max_element(it->second.begin() + static_cast<std::ptrdiff_t>(skip), it->second.end());
}

int64_t PhaseTimer::peakAllocatedOn(int cudaIndex) const { return peaks_.runPeakAllocatedOn(cudaIndex); }

int64_t PhaseTimer::peakReservedOn(int cudaIndex) const { return peaks_.runPeakReservedOn(cudaIndex); }

double medianOf(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  // The lower middle value is the largest of those before `mid`.
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return 0.5 * (lower + values[mid]);
}

double PhaseTimer::medianMs(const std::string& name, size_t skip) const {
  const auto it = steps_.find(name);
  if (it == steps_.end()) return 0.0;
  std::vector<double> v;
  for (size_t i = skip; i < it->second.size(); ++i) v.push_back(it->second[i]);
  return medianOf(std::move(v));
}

}  // namespace strata::train
