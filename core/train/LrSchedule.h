#pragma once
// Learning-rate schedules as pure functions of the optimizer step, so a resumed
// run needs only the step to continue the same curve.
#include <cstdint>

#include "config/RunConfig.h"

namespace strata::train {

class LrSchedule {
 public:
  // `warmupSteps` ramps linearly from baseLr/warmup to baseLr for every kind
  // (Warmup is constant after it). Cosine and Linear decay from baseLr to 0 over
  // the steps after the warmup. Throws ConfigError for totalSteps < 1,
  // warmupSteps < 0 or a negative baseLr.
  LrSchedule(config::LrScheduler kind, double baseLr, int64_t totalSteps, int64_t warmupSteps);

  // The rate for optimizer step `step` (0-based: step 0 is the first update).
  double lrAt(int64_t step) const;

  config::LrScheduler kind() const { return kind_; }
  double baseLr() const { return baseLr_; }
  int64_t totalSteps() const { return totalSteps_; }
  int64_t warmupSteps() const { return warmupSteps_; }

 private:
  config::LrScheduler kind_;
  double baseLr_;
  int64_t totalSteps_;
  int64_t warmupSteps_;
};

}  // namespace strata::train
