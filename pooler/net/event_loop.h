// A single-threaded, level-triggered epoll event loop with timers (to the microsecond where the
// kernel has epoll_pwait2), cross-thread Post(), work after each event batch, and deferred
// deletion. A connection changes its interest only when it has output to flush, is connecting or
// in a TLS handshake, or pauses reading under backpressure (net::Connection::UpdateInterest), so
// the steady state costs no epoll_ctl calls.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pgfleet::net {

// Receives readiness for one fd. `events` is the epoll mask (EPOLLIN, EPOLLOUT, EPOLLERR...).
class IoHandler {
 public:
  virtual ~IoHandler() = default;
  virtual void OnIoEvent(uint32_t events) = 0;
};

// Objects whose deletion must wait until the current callback stack has unwound.
class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};

// Monotonic time without a syscall (vDSO clock_gettime).
absl::Time MonotonicNow();

class EventLoop {
 public:
  using TimerId = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  [[nodiscard]] absl::Status Init();

  // Registers `fd` (level-triggered) for `events`; `handler` must outlive the registration.
  [[nodiscard]] absl::Status Add(int fd, IoHandler* handler, uint32_t events);
  void Modify(int fd, IoHandler* handler, uint32_t events);
  // Deregisters `fd`; pending events for it in the current batch are dropped.
  void Remove(int fd);

  // Runs `fn` on the loop thread after `delay` (once). Returns an id for CancelTimer.
  TimerId RunAfter(absl::Duration delay, std::function<void()> fn);
  // Runs `fn` every `interval` until the loop stops or the timer is cancelled.
  TimerId RunEvery(absl::Duration interval, std::function<void()> fn);
  void CancelTimer(TimerId id);

  // Thread-safe: queues `fn` to run on the loop thread and wakes the loop.
  void Post(std::function<void()> fn);

  // Deletes `object` after the current event batch.
  void DeferredDelete(std::unique_ptr<DeferredDeletable> object);
  // Runs `fn` on the loop thread once the current event batch is done, before the timers and the
  // next epoll_wait. Work queued here sees every event of the batch first.
  void RunAfterBatch(std::function<void()> fn);

  // Runs until Stop(), after which it may run again. Returns an error only if epoll itself
  // fails.
  absl::Status Run();
  // Thread-safe.
  void Stop();

  // False once the kernel refused epoll_pwait2: timers then fire to the millisecond.
  bool precise_timeouts() const { return precise_timeouts_; }

  // The time at the start of the current iteration (cheap, good to ~1 event batch).
  absl::Time now() const { return now_; }
  // The same time in integer microseconds (absl::ToUnixMicros(now())): what the per-transaction
  // bookkeeping subtracts and compares, where absl's Duration arithmetic cost about 3.5% of a
  // transaction's instructions (bench/RESULTS.md).
  int64_t now_us() const { return now_us_; }

 private:
  struct Timer {
    std::function<void()> fn;
    absl::Duration interval;  // zero = one-shot
  };
  class WakeHandler;

  void RunDueTimers();
  void RunPosted();
  void RunAfterBatchWork();
  // How long the next wait may sleep: until the first timer is due, at most a second.
  absl::Duration NextTimeout() const;
  // epoll_pwait2 with the timeout to the microsecond (a sub-millisecond timer fires on time, not
  // a millisecond late); plain epoll_wait in whole milliseconds where the kernel refuses it.
  int Wait(struct epoll_event* events, int max_events);

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::unique_ptr<WakeHandler> wake_handler_;
  bool stopping_ = false;
  bool precise_timeouts_ = true;
  absl::Time now_;
  int64_t now_us_ = 0;
  TimerId next_timer_id_ = 1;
  std::multimap<absl::Time, TimerId> timer_queue_;
  std::map<TimerId, Timer> timers_;
  std::vector<std::unique_ptr<DeferredDeletable>> to_delete_;
  std::vector<std::function<void()>> after_batch_;
  std::vector<std::function<void()>> after_batch_running_;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
};

}  // namespace pgfleet::net
