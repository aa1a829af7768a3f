#pragma once
// Where a training step's time goes, for `strata-train bench --phases`. Each mark
// waits for the run's CUDA devices (device work is asynchronous: without the wait a
// phase would show only its launch cost) and adds the wall time since the previous
// mark to the named phase. The waits slow the step a little; that is why it is an
// option and plain runs and benches do not time phases. Each mark also takes the
// devices' peak allocated memory since the previous mark (and starts the peaks
// afresh), so a bench can say in which phase a step's memory peaks.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "device/PeakMemoryWindows.h"

namespace strata::train {

// The median of `values`: the middle one of an odd count, the mean of the two
// middle ones of an even count; 0 for none.
double medianOf(std::vector<double> values);

class PhaseTimer {
 public:
  // `cudaIndices`: the CUDA devices to wait for at each mark (none on the CPU).
  void setDevices(std::vector<int> cudaIndices);

  // Opens a step: waits, then starts the clock.
  void beginStep();
  // Closes the phase `name` (waits, adds the time since the last mark or beginStep).
  void mark(const std::string& name);
  // Closes the step: phases marked more than once in it (micro-batches) are summed.
  void endStep();

  // Phase names in the order they were first marked.
  const std::vector<std::string>& phases() const { return order_; }
  // Per phase, its time (ms) in each closed step, oldest first.
  const std::map<std::string, std::vector<double>>& perStep() const { return steps_; }
  // The median over closed steps from `skip` on (ms); 0 for a phase that step missed.
  double medianMs(const std::string& name, size_t skip) const;
  // Bytes allocated on the run's CUDA devices (summed) at the end of the phase in
  // the last closed step: after "forward" that is the weights, the training state
  // and the activations kept for the backward. 0 on the CPU.
  int64_t allocatedAfter(const std::string& name) const;
  // The highest peak allocated (bytes, the largest of the run's CUDA devices)
  // reached inside phase `name` in the closed steps from `skip` on; 0 on the CPU.
  int64_t peakDuring(const std::string& name, size_t skip) const;
  // Peak allocated / reserved bytes on CUDA device `cudaIndex` since the timer was
  // given its devices, over every mark (loading and between steps included). The
  // marks start the device's peak figures afresh, so with a timer these, not
  // device::memoryFigures' peaks, are the run's peaks. 0 for a device not timed.
  int64_t peakAllocatedOn(int cudaIndex) const;
  int64_t peakReservedOn(int cudaIndex) const;
  size_t stepCount() const { return stepCount_; }

 private:
  void sync() const;
  std::vector<int> cuda_;
  device::PeakMemoryWindows peaks_;  // one window per mark
  std::map<std::string, int64_t> currentPeak_;
  std::map<std::string, std::vector<int64_t>> stepPeaks_;
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> current_;
  std::map<std::string, int64_t> allocated_;
  std::map<std::string, std::vector<double>> steps_;
  std::vector<std::string> order_;
  size_t stepCount_ = 0;
};

}  // namespace strata::train
