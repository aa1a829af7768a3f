#include "events/EventBus.h"

#include <algorithm>
#include <atomic>

namespace strata::events {

struct Subscription::Slot {
  Listener listener;
  std::atomic<bool> active{true};
  // Held while the listener runs. Recursive so that a listener may drop its own
  // subscription from inside the call; other threads wait for the call to end.
  std::recursive_mutex callMutex;
};

struct Subscription::Registry {
  mutable std::mutex mutex;
  std::vector<std::shared_ptr<Slot>> slots;
};

Subscription::Subscription(std::weak_ptr<Registry> registry, std::shared_ptr<Slot> slot)
    : registry_(std::move(registry)), slot_(std::move(slot)) {}

Subscription::~Subscription() { reset(); }

Subscription::Subscription(Subscription&& other) noexcept
    : registry_(std::move(other.registry_)), slot_(std::move(other.slot_)) {}

Subscription& Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    reset();
    registry_ = std::move(other.registry_);
    slot_ = std::move(other.slot_);
  }
  return *this;
}

bool Subscription::active() const { return slot_ && slot_->active.load(); }

void Subscription::reset() {
  if (!slot_) return;
  slot_->active.store(false);
  if (auto registry = registry_.lock()) {
    std::lock_guard<std::mutex> lock(registry->mutex);
    auto& v = registry->slots;
    v.erase(std::remove(v.begin(), v.end(), slot_), v.end());
  }
  // Wait for a call in flight on another thread (same thread: re-entrant).
  { std::lock_guard<std::recursive_mutex> wait(slot_->callMutex); }
  slot_.reset();
  registry_.reset();
}

EventBus::EventBus() : registry_(std::make_shared<Subscription::Registry>()) {}
EventBus::~EventBus() = default;

Subscription EventBus::subscribe(Listener listener) {
  auto slot = std::make_shared<Subscription::Slot>();
  slot->listener = std::move(listener);
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    registry_->slots.push_back(slot);
  }
  return Subscription(registry_, slot);
}

void EventBus::publish(const Event& event) const {
  std::vector<std::shared_ptr<Subscription::Slot>> snapshot;
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    snapshot = registry_->slots;
  }
  // Called without the registry lock: listeners may (un)subscribe.
  for (const auto& slot : snapshot) {
    std::lock_guard<std::recursive_mutex> call(slot->callMutex);
    if (!slot->active.load()) continue;
    try {
      slot->listener(event);
    } catch (...) {
    }
  }
}

size_t EventBus::listenerCount() const {
  std::lock_guard<std::mutex> lock(registry_->mutex);
  return registry_->slots.size();
}

namespace {
struct NameOf {
  const char* operator()(const StartedEvent&) const { return "started"; }
  const char* operator()(const StepEvent&) const { return "step"; }
  const char* operator()(const PlacementEvent&) const { return "placement"; }
  const char* operator()(const SampleEvent&) const { return "sample"; }
  const char* operator()(const CheckpointEvent&) const { return "checkpoint"; }
  const char* operator()(const ExportEvent&) const { return "export"; }
  const char* operator()(const WarningEvent&) const { return "warning"; }
  const char* operator()(const NoteEvent&) const { return "note"; }
  const char* operator()(const PreflightFailedEvent&) const { return "preflight_failed"; }
  const char* operator()(const PausedEvent&) const { return "paused"; }
  const char* operator()(const ResumedEvent&) const { return "resumed"; }
  const char* operator()(const StoppedEvent&) const { return "stopped"; }
  const char* operator()(const FinishedEvent&) const { return "finished"; }
  const char* operator()(const FailedEvent&) const { return "failed"; }
  const char* operator()(const DatasetEvent&) const { return "dataset"; }
  const char* operator()(const CacheProgressEvent&) const { return "cache_progress"; }
  const char* operator()(const LoadProgressEvent&) const { return "load_progress"; }
};
}  // namespace

const char* eventName(const Event& event) { return std::visit(NameOf{}, event); }

}  // namespace strata::events
