#pragma once
// A thread-safe listener registry. subscribe() returns an RAII Subscription
// that unsubscribes in its destructor. Dispatch runs on the publishing thread
// (the training thread); a listener that needs another thread hops itself
// (ui/TrainerBridge queues into the Qt thread).
//
// Guarantees: a listener may unsubscribe (itself or another) or subscribe
// during dispatch; once a Subscription's destructor returns, its callback is not
// running on any other thread and will not be called again.
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "events/Events.h"

namespace strata::events {

using Listener = std::function<void(const Event&)>;

class EventBus;

class Subscription {
 public:
  Subscription() = default;
  ~Subscription();
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // Unsubscribes now (idempotent).
  void reset();
  bool active() const;

 private:
  friend class EventBus;
  struct Slot;
  struct Registry;
  Subscription(std::weak_ptr<Registry> registry, std::shared_ptr<Slot> slot);
  std::weak_ptr<Registry> registry_;
  std::shared_ptr<Slot> slot_;
};

class EventBus {
 public:
  EventBus();
  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  // The subscription outlives the bus safely (it then does nothing).
  [[nodiscard]] Subscription subscribe(Listener listener);

  // Calls every active listener in subscription order. A listener that throws
  // is not allowed to stop the others: the exception is swallowed (events are
  // reports, never control flow).
  void publish(const Event& event) const;

  size_t listenerCount() const;

 private:
  std::shared_ptr<Subscription::Registry> registry_;
};

}  // namespace strata::events
