#include "train/Ema.h"

#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "placement/Placement.h"

namespace strata::train {

namespace {

class EmaShadowAttachment final : public placement::Attachment {
 public:
  EmaShadowAttachment(std::shared_ptr<std::vector<Ema::Entry>> entries, size_t index)
      : entries_(std::move(entries)), index_(index) {}
  placement::AttachmentKind kind() const override { return emaShadowKind(); }
  std::string hostPath() const override { return (*entries_)[index_].path; }
  std::vector<std::pair<std::string, at::Tensor>> tensors() const override {
    const auto& e = (*entries_)[index_];
    std::vector<std::pair<std::string, at::Tensor>> out{{"shadow", e.shadow}};
    if (e.backup.defined()) out.emplace_back("backup", e.backup);
    return out;
  }
  void moveTo(const c10::Device& device) override {
    auto& e = (*entries_)[index_];
    if (e.shadow.device() != device) e.shadow = e.shadow.to(device);
    if (e.backup.defined() && e.backup.device() != device) e.backup = e.backup.to(device);
  }

 private:
  std::shared_ptr<std::vector<Ema::Entry>> entries_;
  size_t index_;
};

}  // namespace

const placement::AttachmentKind& emaShadowKind() {
  static const placement::AttachmentKind kind = placement::AttachmentKind::registered("ema_shadow");
  return kind;
}

Ema::Ema(std::vector<std::pair<std::string, at::Tensor>> namedParams, EmaOptions options)
    : entries_(std::make_shared<std::vector<Entry>>()), options_(options) {
  if (!(options.decay >= 0.0 && options.decay < 1.0)) {
    throw ConfigError("train.ema_config.ema_decay: " + std::to_string(options.decay) + " is outside [0, 1)");
  }
  if (options.updateEvery < 1) {
    throw ConfigError("train.ema_config.update_every: must be at least 1");
  }
  at::NoGradGuard noGrad;
  entries_->reserve(namedParams.size());
  for (auto& np : namedParams) {
    Entry e;
    e.path = std::move(np.first);
    e.param = np.second;
    // Born where its parameter lives, in float32 whatever the parameter's dtype: a
    // bf16 shadow would round away most of each (1 - decay) step.
    e.shadow = np.second.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    entries_->push_back(std::move(e));
  }
}

Ema::~Ema() = default;

std::vector<std::shared_ptr<placement::Attachment>> Ema::attachments() const {
  std::vector<std::shared_ptr<placement::Attachment>> out;
  for (size_t i = 0; i < entries_->size(); ++i) {
    out.push_back(std::make_shared<EmaShadowAttachment>(entries_, i));
  }
  return out;
}

void Ema::registerWith(placement::Placement& placement) const { placement.attachAll(attachments()); }

bool Ema::update(int64_t step) {
  if (step % options_.updateEvery != 0) return false;
  updateNow();
  return true;
}

void Ema::updateNow() {
  if (swapped_) throw Error("EMA update while the shadows are swapped in (call swapOut first)");
  at::NoGradGuard noGrad;
  const double weight = 1.0 - options_.decay;
  for (auto& e : *entries_) {
    if (e.shadow.device() != e.param.device()) {
      throw PlacementError("EMA shadow of '" + e.path + "' is on " + e.shadow.device().str() + ", its parameter on " +
                           e.param.device().str() + " (register the EMA with Placement after apply())");
    }
    // shadow += (1 - decay) * (param - shadow), in the shadow's dtype.
    e.shadow.lerp_(e.param.detach().to(e.shadow.scalar_type()), weight);
  }
  ++numUpdates_;
}

void Ema::swapIn() {
  if (swapped_) return;
  at::NoGradGuard noGrad;
  for (auto& e : *entries_) {
    if (e.shadow.device() != e.param.device()) {
      throw PlacementError("EMA swap-in of '" + e.path + "': shadow on " + e.shadow.device().str() + ", parameter on " +
                           e.param.device().str());
    }
    e.backup = e.param.detach().clone();
    e.param.detach().copy_(e.shadow);
  }
  swapped_ = true;
}

void Ema::swapOut() {
  if (!swapped_) return;
  at::NoGradGuard noGrad;
  for (auto& e : *entries_) {
    e.param.detach().copy_(e.backup);
    e.backup = at::Tensor();
  }
  swapped_ = false;
}

bool Ema::swappedIn() const { return swapped_; }
size_t Ema::size() const { return entries_->size(); }
const std::string& Ema::path(size_t i) const { return entries_->at(i).path; }
at::Tensor Ema::shadow(size_t i) const { return entries_->at(i).shadow; }

}  // namespace strata::train
