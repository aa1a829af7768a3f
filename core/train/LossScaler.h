#pragma once
// Dynamic loss scaling for fp16 compute (the scheme of torch.amp.GradScaler).
// fp16 has a narrow exponent range, so small activation gradients flush to zero
// in the backward pass. The loss is multiplied by `scale` before backward, and
// the float32 LoRA gradients are divided back before clipping. A step whose
// gradients overflowed (inf/NaN) is skipped and the scale halved. After
// `growthInterval` clean steps in a row the scale doubles again. bf16 and fp32
// have float32's range and need none of this: the scaler is then disabled and
// every call is a no-op.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace strata::train {

struct LossScalerOptions {
  double initScale = 65536.0;  // 2^16, GradScaler's default
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;  // clean steps before the scale grows
  double minScale = 1.0;          // below this an overflow is a diverged run, not a range problem
};

class LossScaler {
 public:
  LossScaler() = default;  // disabled
  explicit LossScaler(LossScalerOptions options);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t cleanSteps() const { return cleanSteps_; }

  // loss x scale (the loss itself when disabled).
  at::Tensor scaled(const at::Tensor& loss) const;
  // After backward: when every gradient is finite, divides them by the scale in
  // place and returns true. Otherwise returns false and leaves them: the caller
  // skips the optimizer step. Always true when disabled.
  bool unscale(const std::vector<at::Tensor>& params) const;
  // Once per optimizer step, with unscale's answer.
  void update(bool finite);
  // True once overflows have pushed the scale below options.minScale.
  bool exhausted() const { return enabled_ && scale_ < options_.minScale; }

  // For checkpoints: a resumed run continues with the same scale.
  void restore(double scale, int64_t cleanSteps);

 private:
  bool enabled_ = false;
  LossScalerOptions options_;
  double scale_ = 1.0;
  int64_t cleanSteps_ = 0;
};

}  // namespace strata::train
