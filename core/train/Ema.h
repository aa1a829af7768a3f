#pragma once
// Exponential moving average of the trainable parameters (docs/design.md §2.5).
// Shadows are cloned AFTER placement, each from its live parameter on that
// parameter's own device (seed bug 5), and registered with Placement as
// attachments (kind "ema_shadow", host path = the parameter's path), so they move
// with their block and the audit checks them. Build it after Placement::apply().
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "placement/Attachment.h"

namespace strata::placement {
class Placement;
}

namespace strata::train {

// "ema_shadow".
const placement::AttachmentKind& emaShadowKind();

struct EmaOptions {
  double decay = 0.99;      // shadow = decay * shadow + (1 - decay) * param
  int64_t updateEvery = 1;  // steps between updates
};

class Ema {
 public:
  // One shadow per named parameter: a detached clone on the parameter's device.
  // Throws ConfigError for decay outside [0, 1) or updateEvery < 1.
  Ema(std::vector<std::pair<std::string, at::Tensor>> namedParams, EmaOptions options);
  ~Ema();
  Ema(const Ema&) = delete;
  Ema& operator=(const Ema&) = delete;

  // One attachment per shadow, and registering them all with `placement`.
  std::vector<std::shared_ptr<placement::Attachment>> attachments() const;
  void registerWith(placement::Placement& placement) const;

  // After optimizer step `step` (1-based): updates the shadows when step is a
  // multiple of updateEvery; returns whether it did. No autograd. Throws
  // PlacementError when a shadow is not on its parameter's device (the owner of
  // moves is Placement: EMA never moves anything itself).
  bool update(int64_t step);
  // Unconditional update (the step counter is the caller's).
  void updateNow();

  // Swap the shadows into the live parameters (sampling, export) and back.
  // swapIn keeps a copy of the live values on each parameter's device.
  void swapIn();
  void swapOut();
  bool swappedIn() const;

  // RAII: swapIn now, swapOut when it goes out of scope.
  class SwapGuard {
   public:
    explicit SwapGuard(Ema& ema) : ema_(ema) { ema_.swapIn(); }
    ~SwapGuard() { ema_.swapOut(); }
    SwapGuard(const SwapGuard&) = delete;
    SwapGuard& operator=(const SwapGuard&) = delete;

   private:
    Ema& ema_;
  };

  size_t size() const;
  const std::string& path(size_t i) const;
  at::Tensor shadow(size_t i) const;  // the live shadow tensor (not a copy)
  const EmaOptions& options() const { return options_; }
  int64_t numUpdates() const { return numUpdates_; }

  struct Entry {
    std::string path;
    at::Tensor param;   // the live parameter (shared impl with the model's)
    at::Tensor shadow;  // same device, same dtype
    at::Tensor backup;  // live values while swapped in; undefined otherwise
  };

 private:
  std::shared_ptr<std::vector<Entry>> entries_;  // shared with the attachments
  EmaOptions options_;
  bool swapped_ = false;
  int64_t numUpdates_ = 0;
};

}  // namespace strata::train
