// Signal watcher: signalfd registered on the event loop.
#include "pooler/net/signal_watcher.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <utility>

namespace pgfleet::net {

SignalWatcher::SignalWatcher(EventLoop& loop, std::vector<int> signals, Callback on_signal)
    : loop_(loop), signals_(std::move(signals)), on_signal_(std::move(on_signal)) {}

SignalWatcher::~SignalWatcher() {
  if (fd_ >= 0) close(fd_);
}

absl::Status SignalWatcher::Start() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : signals_) sigaddset(&mask, sig);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  fd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) return absl::InternalError("signalfd failed");
  return loop_.Add(fd_, this, EPOLLIN);
}

void SignalWatcher::OnIoEvent(uint32_t) {
  struct signalfd_siginfo info;
  while (read(fd_, &info, sizeof(info)) == sizeof(info)) {
    on_signal_(static_cast<int>(info.ssi_signo));
  }
}

}  // namespace pgfleet::net
