// Signals as loop events: a signalfd on the EventLoop, shared by the supervisor, the workers and
// pgfleet-controller.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::net {

class SignalWatcher final : public IoHandler {
 public:
  using Callback = std::function<void(int signo)>;

  // `on_signal` runs on the loop thread once per signal received, in order; it may stop the loop.
  // `loop` must outlive the watcher.
  SignalWatcher(EventLoop& loop, std::vector<int> signals, Callback on_signal);
  // Closes the signalfd. The signals stay blocked: one that arrives later stays pending instead
  // of killing the process with its default action.
  ~SignalWatcher() override;
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Blocks the signals in the calling thread (threads started later inherit the mask, and so do
  // forked children across exec), ignores SIGPIPE, and watches the signalfd on the loop. Call it
  // before starting any thread, so that no thread takes a signal with its default action.
  [[nodiscard]] absl::Status Start();

  void OnIoEvent(uint32_t events) override;

 private:
  EventLoop& loop_;
  std::vector<int> signals_;
  Callback on_signal_;
  int fd_ = -1;
};

}  // namespace pgfleet::net
