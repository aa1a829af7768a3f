#include "train/LossScaler.h"

#include <cmath>
#include <string>

#include "common/Error.h"
#include "train/GradClip.h"

namespace strata::train {

LossScaler::LossScaler(LossScalerOptions options) : enabled_(true), options_(options), scale_(options.initScale) {
  if (!(options.initScale > 0) || !(options.growthFactor >= 1) || !(options.backoffFactor > 0) ||
      !(options.backoffFactor < 1) || options.growthInterval < 1)
    throw Error("LossScaler: invalid options (scale " + std::to_string(options.initScale) + ", growth " +
                std::to_string(options.growthFactor) + ", backoff " + std::to_string(options.backoffFactor) +
                ", interval " + std::to_string(options.growthInterval) + ")");
}

at::Tensor LossScaler::scaled(const at::Tensor& loss) const { return enabled_ ? loss * scale_ : loss; }

bool LossScaler::unscale(const std::vector<at::Tensor>& params) const {
  if (!enabled_) return true;
  // One norm per device tells whether any element is inf/NaN.
  if (!std::isfinite(gradNorm(params))) return false;
  const double inverse = 1.0 / scale_;
  for (const auto& p : params) {
    auto g = p.grad();
    if (g.defined()) g.mul_(inverse);
  }
  return true;
}

void LossScaler::update(bool finite) {
  if (!enabled_) return;
  if (!finite) {
    scale_ *= options_.backoffFactor;
    cleanSteps_ = 0;
    return;
  }
  if (++cleanSteps_ >= options_.growthInterval) {
    scale_ *= options_.growthFactor;
    cleanSteps_ = 0;
  }
}

void LossScaler::restore(double scale, int64_t cleanSteps) {
  if (!enabled_) return;
  if (!(scale > 0) || !std::isfinite(scale) || cleanSteps < 0)
    throw Error("LossScaler: invalid checkpointed state (scale " + std::to_string(scale) + ", clean steps " +
                std::to_string(cleanSteps) + ")");
  scale_ = scale;
  cleanSteps_ = cleanSteps;
}

}  // namespace strata::train
