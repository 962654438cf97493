// epoll event loop.
#include "pooler/net/event_loop.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "pooler/base/strings.h"

namespace pgfleet::net {

absl::Time MonotonicNow() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::UnixEpoch() + absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
}

class EventLoop::WakeHandler final : public IoHandler {
 public:
  explicit WakeHandler(EventLoop* loop) : loop_(loop) {}
  void OnIoEvent(uint32_t) override {
    uint64_t value;
    ssize_t ignored = read(loop_->wake_fd_, &value, sizeof(value));
    (void)ignored;
    loop_->RunPosted();
  }

 private:
  EventLoop* loop_;
};

EventLoop::EventLoop() : now_(MonotonicNow()), now_us_(absl::ToUnixMicros(now_)) {}

EventLoop::~EventLoop() {
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::Status EventLoop::Init() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return absl::InternalError(base::StrCat("epoll_create1: ", strerror(errno)));
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError(base::StrCat("eventfd: ", strerror(errno)));
  wake_handler_ = std::make_unique<WakeHandler>(this);
  return Add(wake_fd_, wake_handler_.get(), EPOLLIN);
}

absl::Status EventLoop::Add(int fd, IoHandler* handler, uint32_t events) {
  struct epoll_event ev;
  ev.events = events;
  ev.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(base::StrCat("epoll_ctl(ADD): ", strerror(errno)));
  }
  return absl::OkStatus();
}

void EventLoop::Modify(int fd, IoHandler* handler, uint32_t events) {
  struct epoll_event ev;
  ev.events = events;
  ev.data.ptr = handler;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Remove(int fd) { epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

EventLoop::TimerId EventLoop::RunAfter(absl::Duration delay, std::function<void()> fn) {
  TimerId id = next_timer_id_++;
  timers_.emplace(id, Timer{std::move(fn), absl::ZeroDuration()});
  timer_queue_.emplace(MonotonicNow() + delay, id);
  return id;
}

EventLoop::TimerId EventLoop::RunEvery(absl::Duration interval, std::function<void()> fn) {
  TimerId id = next_timer_id_++;
  timers_.emplace(id, Timer{std::move(fn), interval});
  timer_queue_.emplace(MonotonicNow() + interval, id);
  return id;
}

void EventLoop::CancelTimer(TimerId id) { timers_.erase(id); }

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void EventLoop::DeferredDelete(std::unique_ptr<DeferredDeletable> object) {
  to_delete_.push_back(std::move(object));
}

void EventLoop::RunAfterBatch(std::function<void()> fn) { after_batch_.push_back(std::move(fn)); }

void EventLoop::RunAfterBatchWork() {
  // Work may queue more work (a served client releases a server at once): run until none is left.
  // Both vectors are members, so their capacity stays and a batch allocates nothing.
  while (!after_batch_.empty()) {
    after_batch_running_.swap(after_batch_);
    for (auto& fn : after_batch_running_) fn();
    after_batch_running_.clear();
  }
}

void EventLoop::Stop() {
  stopping_ = true;
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void EventLoop::RunPosted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

absl::Duration EventLoop::NextTimeout() const {
  constexpr absl::Duration kLongest = absl::Seconds(1);
  if (timer_queue_.empty()) return kLongest;
  const absl::Duration until = timer_queue_.begin()->first - MonotonicNow();
  return std::clamp(until, absl::ZeroDuration(), kLongest);
}

int EventLoop::Wait(struct epoll_event* events, int max_events) {
  const absl::Duration timeout = NextTimeout();
  if (precise_timeouts_) {
    const struct timespec ts = absl::ToTimespec(timeout);
    const int n = epoll_pwait2(epoll_fd_, events, max_events, &ts, nullptr);
    // Kernels before 5.11 lack it, and some container runtimes' seccomp profiles refuse it:
    // from then on, whole milliseconds.
    if (n >= 0 || (errno != ENOSYS && errno != EPERM)) return n;
    precise_timeouts_ = false;
  }
  // Rounded up, so that a timer never fires early and the loop does not spin until it is due.
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  return epoll_wait(epoll_fd_, events, max_events, static_cast<int>(ms));
}

void EventLoop::RunDueTimers() {
  while (!timer_queue_.empty() && timer_queue_.begin()->first <= now_) {
    auto [due, id] = *timer_queue_.begin();
    timer_queue_.erase(timer_queue_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;  // cancelled
    if (it->second.interval > absl::ZeroDuration()) {
      timer_queue_.emplace(now_ + it->second.interval, id);
      auto fn = it->second.fn;  // the callback may cancel its own timer
      fn();
    } else {
      auto fn = std::move(it->second.fn);
      timers_.erase(it);
      fn();
    }
  }
}

absl::Status EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  struct epoll_event events[kMaxEvents];
  while (!stopping_) {
    int n = Wait(events, kMaxEvents);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(base::StrCat("epoll_wait: ", strerror(errno)));
    }
    now_ = MonotonicNow();
    now_us_ = absl::ToUnixMicros(now_);
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<IoHandler*>(events[i].data.ptr);
      // A handler deleted earlier in this batch is parked in to_delete_, so the pointer is
      // still valid; handlers ignore events after they closed themselves.
      handler->OnIoEvent(events[i].events);
    }
    // Before the timers too, so that housekeeping does not see clients waiting for a server
    // that this batch has already freed.
    RunAfterBatchWork();
    RunDueTimers();
    RunAfterBatchWork();
    to_delete_.clear();
  }
  RunPosted();
  to_delete_.clear();
  stopping_ = false;  // the loop may run again
  return absl::OkStatus();
}

}  // namespace pgfleet::net
