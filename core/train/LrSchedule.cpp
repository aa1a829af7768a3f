#include "train/LrSchedule.h"

#include <algorithm>
#include <cmath>

#include "common/Error.h"

namespace strata::train {

LrSchedule::LrSchedule(config::LrScheduler kind, double baseLr, int64_t totalSteps, int64_t warmupSteps)
    : kind_(kind), baseLr_(baseLr), totalSteps_(totalSteps), warmupSteps_(warmupSteps) {
  if (totalSteps < 1) throw ConfigError("train.steps: must be at least 1, got " + std::to_string(totalSteps));
  if (warmupSteps < 0) throw ConfigError("train.lr_warmup_steps: must be >= 0, got " + std::to_string(warmupSteps));
  if (!(baseLr >= 0.0)) throw ConfigError("train.lr: must be >= 0, got " + std::to_string(baseLr));
}

double LrSchedule::lrAt(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  if (step < warmupSteps_) return baseLr_ * static_cast<double>(step + 1) / static_cast<double>(warmupSteps_);
  const int64_t decaySteps = std::max<int64_t>(totalSteps_ - warmupSteps_, 1);
  // Progress through the decay phase, 0 at its first step, 1 past the last.
  const double t = std::min(1.0, static_cast<double>(step - warmupSteps_) / static_cast<double>(decaySteps));
  switch (kind_) {
    case config::LrScheduler::Constant:
    case config::LrScheduler::Warmup:
      return baseLr_;
    case config::LrScheduler::Cosine:
      return baseLr_ * 0.5 * (1.0 + std::cos(M_PI * t));
    case config::LrScheduler::Linear:
      return baseLr_ * (1.0 - t);
  }
  return baseLr_;
}

}  // namespace strata::train
