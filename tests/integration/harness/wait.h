// The one way integration tests wait for something to happen: a bounded poll. A test never sleeps
// a fixed time and then looks once (that fails on a busy machine and hides how long things take);
// it polls until the condition holds or a deadline passes, then asserts on what it saw last.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace pgfleet::testing {

inline constexpr std::chrono::milliseconds kWaitTimeout{10000};
inline constexpr std::chrono::milliseconds kWaitInterval{20};

// Calls `sample()` until `done(value)` holds or `timeout` has passed (then once more), and returns
// the last value, so the caller asserts on it exactly as it would on a single look:
//   EXPECT_EQ(WaitFor([&] { return ServerConnections(); }, [](int n) { return n == 3; }), 3);
// With one argument the sample itself is the condition (anything that converts to bool):
//   EXPECT_TRUE(WaitFor([&] { return fleet.Log().find("event=reloaded") != npos; }));
template <typename Sample, typename Done>
requires std::is_invocable_r_v<bool, Done&, std::invoke_result_t<Sample&>>
auto WaitFor(Sample&& sample, Done&& done, std::chrono::milliseconds timeout = kWaitTimeout,
             std::chrono::milliseconds interval = kWaitInterval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto value = sample();
  while (!done(value) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(interval);
    value = sample();
  }
  return value;
}

template <typename Condition>
requires std::is_invocable_v<Condition&>
auto WaitFor(Condition&& condition, std::chrono::milliseconds timeout = kWaitTimeout,
             std::chrono::milliseconds interval = kWaitInterval) {
  return WaitFor(
      std::forward<Condition>(condition),
      [](const auto& value) { return static_cast<bool>(value); }, timeout, interval);
}

// Joins `threads` (a load) while sampling every `interval`, for at most `timeout`, so that a limit
// is checked at every look while the load runs; returns the largest sample.
template <typename Sample>
auto MaxWhileJoining(std::vector<std::thread>& threads, Sample&& sample,
                     std::chrono::milliseconds timeout,
                     std::chrono::milliseconds interval = std::chrono::milliseconds(50)) {
  std::atomic<bool> done{false};
  std::thread joiner([&] {
    for (auto& t : threads) t.join();
    done = true;
  });
  auto most = sample();
  WaitFor(
      [&] {
        most = std::max(most, sample());
        return done.load();
      },
      timeout, interval);
  joiner.join();
  return most;
}

}  // namespace pgfleet::testing
