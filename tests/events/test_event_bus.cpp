#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "events/EventBus.h"

using namespace strata::events;

TEST(EventBus, DeliversToEveryListenerInOrder) {
  EventBus bus;
  std::vector<std::string> seen;
  auto a = bus.subscribe([&](const Event& e) { seen.push_back(std::string("a:") + eventName(e)); });
  auto b = bus.subscribe([&](const Event& e) {
    if (auto* s = std::get_if<StepEvent>(&e)) seen.push_back("b:" + std::to_string(s->step));
  });
  StepEvent step;
  step.step = 7;
  bus.publish(step);
  bus.publish(WarningEvent{"careful", 3});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], "a:step");
  EXPECT_EQ(seen[1], "b:7");
  EXPECT_EQ(seen[2], "a:warning");
}

TEST(EventBus, SubscriptionUnsubscribesInDestructor) {
  EventBus bus;
  int calls = 0;
  {
    auto sub = bus.subscribe([&](const Event&) { ++calls; });
    bus.publish(PausedEvent{1});
    EXPECT_EQ(bus.listenerCount(), 1u);
  }
  bus.publish(PausedEvent{2});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(bus.listenerCount(), 0u);
}

TEST(EventBus, MovedSubscriptionStaysActive) {
  EventBus bus;
  int calls = 0;
  Subscription kept;
  {
    auto sub = bus.subscribe([&](const Event&) { ++calls; });
    kept = std::move(sub);
  }
  bus.publish(PausedEvent{1});
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(kept.active());
  kept.reset();
  EXPECT_FALSE(kept.active());
  bus.publish(PausedEvent{1});
  EXPECT_EQ(calls, 1);
}

TEST(EventBus, ListenerMayUnsubscribeItselfAndOthersDuringDispatch) {
  EventBus bus;
  int aCalls = 0, bCalls = 0;
  Subscription a, b;
  a = bus.subscribe([&](const Event&) {
    ++aCalls;
    a.reset();  // itself, while running
    b.reset();  // the next one: must not be called any more
  });
  b = bus.subscribe([&](const Event&) { ++bCalls; });
  bus.publish(PausedEvent{1});
  bus.publish(PausedEvent{2});
  EXPECT_EQ(aCalls, 1);
  EXPECT_EQ(bCalls, 0);
  EXPECT_EQ(bus.listenerCount(), 0u);
}

TEST(EventBus, ListenerMaySubscribeDuringDispatch) {
  EventBus bus;
  int inner = 0;
  Subscription later;
  auto outer = bus.subscribe([&](const Event&) {
    if (!later.active()) later = bus.subscribe([&](const Event&) { ++inner; });
  });
  bus.publish(PausedEvent{1});
  EXPECT_EQ(inner, 0);  // not part of the dispatch that added it
  bus.publish(PausedEvent{2});
  EXPECT_EQ(inner, 1);
}

TEST(EventBus, ThrowingListenerDoesNotStopOthers) {
  EventBus bus;
  int calls = 0;
  auto a = bus.subscribe([&](const Event&) { throw std::runtime_error("listener bug"); });
  auto b = bus.subscribe([&](const Event&) { ++calls; });
  EXPECT_NO_THROW(bus.publish(PausedEvent{1}));
  EXPECT_EQ(calls, 1);
}

TEST(EventBus, SubscriptionOutlivesBus) {
  Subscription sub;
  {
    EventBus bus;
    sub = bus.subscribe([](const Event&) {});
  }
  EXPECT_NO_THROW(sub.reset());
}

TEST(EventBus, UnsubscribeWaitsForCallInFlightOnAnotherThread) {
  EventBus bus;
  std::atomic<bool> entered{false}, finished{false};
  auto sub = bus.subscribe([&](const Event&) {
    entered = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    finished = true;
  });
  std::thread emitter([&] { bus.publish(PausedEvent{1}); });
  while (!entered) std::this_thread::yield();
  sub.reset();  // must block until the callback has returned
  EXPECT_TRUE(finished.load());
  emitter.join();
}

TEST(EventBus, ConcurrentEmitAndSubscribe) {
  EventBus bus;
  std::atomic<int> calls{0};
  std::atomic<bool> stop{false};
  std::thread emitter([&] {
    while (!stop) bus.publish(StepEvent{});
  });
  for (int i = 0; i < 200; ++i) {
    auto s = bus.subscribe([&](const Event&) { ++calls; });
    std::this_thread::yield();
  }
  stop = true;
  emitter.join();
  EXPECT_EQ(bus.listenerCount(), 0u);
}
