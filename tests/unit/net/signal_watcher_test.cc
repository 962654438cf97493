// Tests for pooler/net/signal_watcher.h: signals arrive as loop events, in order, every one of a
// batch, and only those watched.
#include "pooler/net/signal_watcher.h"

#include <signal.h>

#include <vector>

#include "gtest/gtest.h"

namespace pgfleet::net {
namespace {

// Runs `loop` until `done` or 5 s, whichever is first.
void RunUntil(EventLoop& loop, const std::function<bool()>& done) {
  const EventLoop::TimerId guard = loop.RunAfter(absl::Seconds(5), [&loop] { loop.Stop(); });
  const EventLoop::TimerId poll = loop.RunEvery(absl::Milliseconds(1), [&] {
    if (done()) loop.Stop();
  });
  ASSERT_TRUE(loop.Run().ok());
  loop.CancelTimer(guard);
  loop.CancelTimer(poll);
}

TEST(SignalWatcherTest, DeliversEverySignalOfABatchInOrderOnTheLoop) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  std::vector<int> seen;
  SignalWatcher watcher(loop, {SIGUSR1, SIGUSR2}, [&](int signo) { seen.push_back(signo); });
  ASSERT_TRUE(watcher.Start().ok());
  // Blocked now: raised signals wait in the signalfd instead of killing the test.
  ASSERT_EQ(raise(SIGUSR2), 0);
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_TRUE(seen.empty());  // nothing runs outside the loop
  RunUntil(loop, [&] { return seen.size() >= 2; });
  // Standard signals are dequeued lowest number first.
  EXPECT_EQ(seen, (std::vector<int>{SIGUSR1, SIGUSR2}));
}

TEST(SignalWatcherTest, TheCallbackMayStopTheLoop) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  int hups = 0;
  SignalWatcher watcher(loop, {SIGHUP}, [&](int signo) {
    EXPECT_EQ(signo, SIGHUP);
    ++hups;
    loop.Stop();
  });
  ASSERT_TRUE(watcher.Start().ok());
  const EventLoop::TimerId guard = loop.RunAfter(absl::Seconds(5), [&loop] { loop.Stop(); });
  ASSERT_EQ(raise(SIGHUP), 0);
  ASSERT_TRUE(loop.Run().ok());
  loop.CancelTimer(guard);
  EXPECT_EQ(hups, 1);
}

TEST(SignalWatcherTest, BlocksItsSignalsAndIgnoresSigpipe) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  SignalWatcher watcher(loop, {SIGUSR1}, [](int) {});
  ASSERT_TRUE(watcher.Start().ok());
  sigset_t blocked;
  ASSERT_EQ(sigprocmask(SIG_BLOCK, nullptr, &blocked), 0);
  EXPECT_EQ(sigismember(&blocked, SIGUSR1), 1);
  struct sigaction pipe_action;
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &pipe_action), 0);
  EXPECT_EQ(pipe_action.sa_handler, SIG_IGN);
}

}  // namespace
}  // namespace pgfleet::net
