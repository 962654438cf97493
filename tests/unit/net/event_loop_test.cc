// Tests for pooler/net/event_loop.h: work queued with RunAfterBatch runs once every event of the
// batch has been handled, before the timers and the next wait, including work it queues itself;
// timers fire on time to the microsecond.
#include "pooler/net/event_loop.h"

#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pgfleet::net {
namespace {

// A pipe whose read end reports readiness to `on_readable`.
class ReadablePipe : public IoHandler {
 public:
  ReadablePipe(std::string name, std::vector<std::string>* trace, std::function<void()> then)
      : name_(std::move(name)), trace_(trace), then_(std::move(then)) {
    EXPECT_EQ(pipe(fds_), 0);
  }
  ~ReadablePipe() override {
    close(fds_[0]);
    close(fds_[1]);
  }
  int read_fd() const { return fds_[0]; }
  void MakeReadable() { ASSERT_EQ(write(fds_[1], "x", 1), 1); }

  void OnIoEvent(uint32_t) override {
    char byte;
    ASSERT_EQ(read(fds_[0], &byte, 1), 1);
    trace_->push_back(name_);
    if (then_) then_();
  }

 private:
  int fds_[2] = {-1, -1};
  std::string name_;
  std::vector<std::string>* trace_;
  std::function<void()> then_;
};

TEST(EventLoopTest, AfterBatchWorkRunsOnceEveryEventOfTheBatchIsHandled) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  std::vector<std::string> trace;
  auto queue_work = [&](const std::string& name) {
    loop.RunAfterBatch([&trace, &loop, name] {
      trace.push_back("after:" + name);
      // Work queued by work runs in the same round, before the timers.
      loop.RunAfterBatch([&trace, name] { trace.push_back("after-after:" + name); });
    });
  };
  ReadablePipe a("a", &trace, [&] { queue_work("a"); });
  ReadablePipe b("b", &trace, [&] { queue_work("b"); });
  ASSERT_TRUE(loop.Add(a.read_fd(), &a, EPOLLIN).ok());
  ASSERT_TRUE(loop.Add(b.read_fd(), &b, EPOLLIN).ok());
  a.MakeReadable();
  b.MakeReadable();  // both ready before the loop waits: one batch
  loop.RunAfter(absl::ZeroDuration(), [&] {
    trace.push_back("timer");
    loop.Stop();
  });
  ASSERT_TRUE(loop.Run().ok());

  ASSERT_EQ(trace.size(), 7u);
  // epoll may report a and b in either order; what matters is that both come first.
  EXPECT_TRUE((trace[0] == "a" && trace[1] == "b") || (trace[0] == "b" && trace[1] == "a"));
  EXPECT_EQ(trace[2], "after:" + trace[0]);
  EXPECT_EQ(trace[3], "after:" + trace[1]);
  EXPECT_EQ(trace[4], "after-after:" + trace[0]);
  EXPECT_EQ(trace[5], "after-after:" + trace[1]);
  EXPECT_EQ(trace[6], "timer");
}

TEST(EventLoopTest, AfterBatchWorkQueuedByATimerRunsBeforeTheNextWait) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  std::vector<std::string> trace;
  loop.RunAfter(absl::ZeroDuration(), [&] {
    trace.push_back("timer");
    loop.RunAfterBatch([&] {
      trace.push_back("after");
      loop.Stop();
    });
  });
  // Without the second round after the timers, the loop would wait here for a second.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(loop.Run().ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(trace, (std::vector<std::string>{"timer", "after"}));
}

// Sub-millisecond timers (the pool's settle time for an idle server before it moves to a sibling
// worker) must fire on time, never early, and not a millisecond late where epoll_pwait2 works.
TEST(EventLoopTest, SubMillisecondTimersFireOnTimeNeverEarly) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  constexpr int kChained = 200;
  constexpr absl::Duration kDelay = absl::Microseconds(50);
  int fired = 0;
  int early = 0;
  std::function<void()> arm = [&] {
    const absl::Time due = MonotonicNow() + kDelay;
    loop.RunAfter(kDelay, [&, due] {
      if (MonotonicNow() < due) ++early;
      if (++fired == kChained) {
        loop.Stop();
      } else {
        arm();
      }
    });
  };
  arm();
  const absl::Time start = MonotonicNow();
  ASSERT_TRUE(loop.Run().ok());
  const absl::Duration took = MonotonicNow() - start;
  EXPECT_EQ(fired, kChained);
  EXPECT_EQ(early, 0);
  EXPECT_GE(took, kChained * kDelay);
  if (loop.precise_timeouts()) {
    // Whole-millisecond waits would take at least kChained ms; 200 wake-ups of 50 us leave
    // plenty of room for a busy machine below that.
    EXPECT_LT(took, absl::Milliseconds(kChained) * 0.75) << "timers fired to the millisecond";
  } else {
    GTEST_LOG_(INFO) << "the kernel refused epoll_pwait2: millisecond timers";
    EXPECT_GE(took, absl::Milliseconds(kChained));
  }
}

}  // namespace
}  // namespace pgfleet::net
