// Worker lease: registration, reports, shares, acks and fail-static fallback.
#include "peering/controller/lease_client.h"

#include <unistd.h>

#include <algorithm>
#include <deque>

#include "peering/grpc_callback_threads.h"
#include "pooler/base/log.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {
namespace {

constexpr absl::Duration kTickInterval = absl::Milliseconds(25);
// After closing servers to get under a lowered cap, wait this long before acknowledging, so
// PostgreSQL has reaped the backends before the freed room is granted elsewhere.
constexpr absl::Duration kSettle = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

// One lease stream. Reactions run on gRPC threads: they copy what arrives and Post() it to the
// loop. Writes may start from the loop thread at any time, so the stream holds itself open
// (AddHold) until its read side ends. Deletes itself after OnDone.
class LeaseClient::Stream final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::ControllerMessage> {
 public:
  Stream(net::EventLoop& loop, LeaseClient* owner, uint64_t generation,
         std::shared_ptr<Registration> registration)
      : loop_(loop), owner_(owner), generation_(generation), registration_(registration) {}

  void Start(v1::Controller::Stub* stub, const PeerCredentials& credentials,
             v1::WorkerMessage hello, std::shared_ptr<Stream> self) {
    self_ = std::move(self);
    credentials.Authorize(&context_);
    stub->async()->Lease(&context_, this);
    AddHold();
    Send(std::move(hello));
    StartRead(&in_);
    StartCall();
  }

  // Thread-safe. False once the stream is closing. gRPC may run a reaction inline inside a
  // Start* call, so the mutex is never held across one.
  bool Send(v1::WorkerMessage message) {
    const v1::WorkerMessage* start = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return false;
      queue_.push_back(std::move(message));
      if (writing_) return true;
      writing_ = true;  // keeps the hold (and so the reactor) until OnWriteDone
      start = &queue_.front();
    }
    StartWrite(start);
    return true;
  }
  void Cancel() { context_.TryCancel(); }
  // The owner and its loop are going away: reactions still to come must not touch them.
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    detached_ = true;
  }
  // Blocks until OnDone or `timeout`; true when done.
  bool WaitDone(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return done_; });
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool release = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        closed_ = true;
        release = !writing_ && !hold_released_;
        hold_released_ = hold_released_ || release;
      }
      if (release) RemoveHold();
      return;
    }
    if (in_.has_welcome()) {
      std::lock_guard<std::mutex> lock(registration_->mu);
      if (registration_->welcomed_generation < generation_) {
        registration_->welcomed_generation = generation_;
        registration_->peer_id = in_.welcome().peer_id();
      }
      registration_->cv.notify_all();
    }
    {
      // Under mu_, so the owner cannot finish its destructor between the check and the Post.
      std::lock_guard<std::mutex> lock(mu_);
      if (!detached_) {
        loop_.Post([owner = owner_, generation = generation_, message = in_] {
          owner->OnMessage(generation, message);
        });
      }
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    const v1::WorkerMessage* next = nullptr;
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty()) queue_.pop_front();
      if (!ok || closed_) {
        closed_ = closed_ || !ok;
        queue_.clear();
      }
      if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        release = closed_ && !hold_released_;
        hold_released_ = hold_released_ || release;
      }
      cv_.notify_all();
    }
    if (next != nullptr) StartWrite(next);
    if (release) RemoveHold();
  }

  void OnDone(const grpc::Status& status) override {
    const std::string error = status.ok() ? "" : status.error_message();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!detached_) {
        loop_.Post([owner = owner_, generation = generation_, error] {
          owner->OnStreamDone(generation, error);
        });
      }
    }
    {
      std::lock_guard<std::mutex> lock(registration_->mu);
      registration_->failed_generation = std::max(registration_->failed_generation, generation_);
      registration_->cv.notify_all();
    }
    std::shared_ptr<Stream> self = std::move(self_);  // may delete this on return
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    closed_ = true;
    cv_.notify_all();
  }

 private:
  net::EventLoop& loop_;
  LeaseClient* owner_;
  const uint64_t generation_;
  std::shared_ptr<Registration> registration_;
  grpc::ClientContext context_;
  v1::ControllerMessage in_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::WorkerMessage> queue_;  // front() is being written
  bool writing_ = false;
  bool closed_ = false;  // the read side ended or a write failed: no new writes
  bool hold_released_ = false;
  bool done_ = false;
  bool detached_ = false;
  std::shared_ptr<Stream> self_;
};

LeaseClient::LeaseClient(net::EventLoop& loop, const ControllerOptions& options,
                         const PeerCredentials& credentials, LeaseIdentity identity)
    : loop_(loop),
      options_(options),
      credentials_(credentials),
      identity_(std::move(identity)),
      stub_(v1::Controller::NewStub(credentials.CreateTcpChannel(options.address))),
      report_interval_(options.renew_interval) {
  PinGrpcCallbackThreads();
}

LeaseClient::~LeaseClient() {
  leaving_ = true;
  if (tick_timer_ != 0) loop_.CancelTimer(tick_timer_);
  if (report_timer_ != 0) loop_.CancelTimer(report_timer_);
  if (stream_) retired_streams_.push_back(stream_);
  for (const auto& weak : retired_streams_) {
    std::shared_ptr<Stream> stream = weak.lock();
    if (stream == nullptr) continue;
    stream->Cancel();
    // OnDone normally follows the cancel at once; a slow one (a loaded machine, sanitizers) must
    // still not reach this object or its loop afterwards.
    stream->WaitDone(absl::Seconds(5));
    stream->Detach();
  }
}

void LeaseClient::Connect() {
  ++generation_;
  welcomed_ = false;
  auto stream = std::make_shared<Stream>(loop_, this, generation_, registration_);
  if (stream_) {
    std::erase_if(retired_streams_, [](const auto& weak) { return weak.expired(); });
    retired_streams_.push_back(stream_);
  }
  stream_ = stream;
  v1::WorkerMessage hello = BuildHello();
  hello_sent_at_ = net::MonotonicNow();
  stream->Start(stub_.get(), credentials_, std::move(hello), stream);
}

uint32_t LeaseClient::Register() {
  const absl::Time deadline = net::MonotonicNow() + options_.register_timeout;
  while (true) {
    Connect();
    const uint64_t generation = generation_;
    std::unique_lock<std::mutex> lock(registration_->mu);
    registration_->cv.wait_for(
        lock,
        absl::ToChronoNanoseconds(std::max(deadline - net::MonotonicNow(), absl::ZeroDuration())),
        [&] {
          return registration_->welcomed_generation == generation ||
                 registration_->failed_generation >= generation;
        });
    if (registration_->welcomed_generation == generation) {
      peer_id_ = registration_->peer_id;
      PGFLEET_LOG(kInfo, "controller_registered", "peer_id=", peer_id_,
                  " block=", protocol::PodBlockOfPeerId(peer_id_));
      return peer_id_;
    }
    lock.unlock();
    const absl::Duration left = deadline - net::MonotonicNow();
    if (left <= absl::ZeroDuration()) break;
    absl::SleepFor(std::min(left, absl::Milliseconds(100)));
  }
  // Whatever the last attempt brings later names an id this worker will not use: drop it.
  if (stream_) stream_->Cancel();
  stream_.reset();
  ++generation_;
  peer_id_ = identity_.local_peer_id;
  PGFLEET_LOG(kWarning, "controller_unreachable", "address=", options_.address,
              " peer_id=", peer_id_,
              " effect=\"no budget share until it answers; keys name no pod\"");
  return peer_id_;
}

void LeaseClient::Attach(CapTarget* target,
                         std::function<void(const v1::Directory&)> on_directory) {
  target_ = target;
  on_directory_ = std::move(on_directory);
  for (const auto& [db, share] : shares_) target_->SetCap(db, std::max(share.cap, 0));
  tick_timer_ = loop_.RunEvery(kTickInterval, [this] { Tick(); });
  report_timer_ = loop_.RunEvery(report_interval_, [this] { SendReport(); });
  if (!stream_) ScheduleReconnect();
}

void LeaseClient::ScheduleReconnect() {
  if (reconnect_scheduled_ || leaving_) return;
  reconnect_scheduled_ = true;
  loop_.RunAfter(backoff_, [this] {
    reconnect_scheduled_ = false;
    if (leaving_ || stream_) return;
    // The Hello reports what is open; servers closed a moment ago may still have backends in
    // PostgreSQL, and the controller frees the difference at once.
    const absl::Duration since_close = net::MonotonicNow() - last_close_;
    if (since_close < kSettle) {
      reconnect_scheduled_ = true;
      loop_.RunAfter(kSettle - since_close, [this] {
        reconnect_scheduled_ = false;
        if (!leaving_ && !stream_) Connect();
      });
      return;
    }
    Connect();
  });
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void LeaseClient::OnStreamDone(uint64_t generation, const std::string& error) {
  if (generation != generation_) return;
  stream_.reset();
  welcomed_ = false;
  PGFLEET_LOG(kInfo, "controller_disconnected", "error=", base::LogQuote(error),
              " lease=", has_lease_ ? "kept" : "none");
  ScheduleReconnect();
}

void LeaseClient::OnMessage(uint64_t generation, const v1::ControllerMessage& message) {
  if (generation != generation_ || leaving_) return;
  if (message.has_welcome()) {
    const auto& w = message.welcome();
    if (peer_id_ != 0 && w.peer_id() != peer_id_) {
      PGFLEET_LOG(kError, "peer_id_mismatch", "ours=", peer_id_, " controller=", w.peer_id());
      if (stream_) stream_->Cancel();
      return;
    }
    peer_id_ = w.peer_id();
    if (w.lease_timeout_ms() > 0) options_.lease_timeout = absl::Milliseconds(w.lease_timeout_ms());
    if (w.forget_after_ms() > 0) options_.forget_after = absl::Milliseconds(w.forget_after_ms());
    if (w.renew_interval_ms() > 0) {
      const absl::Duration interval = absl::Milliseconds(w.renew_interval_ms());
      if (interval != report_interval_ && report_timer_ != 0) {
        loop_.CancelTimer(report_timer_);
        report_timer_ = loop_.RunEvery(interval, [this] { SendReport(); });
      }
      report_interval_ = interval;
    }
    welcomed_ = true;
    // The controller's lease for us started when it read the Hello, which is no earlier than
    // when we sent it. A Hello that waited (a paused controller) may leave no lease at all:
    // then we hold what we have until the first report is renewed.
    lease_start_ = hello_sent_at_;
    has_lease_ = LeaseValid(net::MonotonicNow());
    backoff_ = absl::Milliseconds(100);
    pending_ack_ = acked_ = 0;  // grant numbers are per stream from here on
    PGFLEET_LOG(kInfo, "controller_joined", "peer_id=", peer_id_,
                " controller=", w.controller_instance(),
                " lease=", has_lease_ ? "yes" : "after renewal");
    SendReport();
  } else if (message.has_renewed()) {
    RenewFrom(message.renewed().report_seq());
  } else if (message.has_grant()) {
    OnGrant(message.grant());
  } else if (message.has_directory()) {
    directory_ = message.directory();
    if (on_directory_) on_directory_(directory_);
  }
}

void LeaseClient::RenewFrom(uint64_t report_seq) {
  auto it = report_sent_at_.find(report_seq);
  if (it == report_sent_at_.end()) return;
  lease_start_ = std::max(lease_start_, it->second);
  report_sent_at_.erase(report_sent_at_.begin(), std::next(it));
  if (!has_lease_ && LeaseValid(net::MonotonicNow())) {
    has_lease_ = true;
    PGFLEET_LOG(kInfo, "controller_lease_renewed", "peer_id=", peer_id_);
  }
}

bool LeaseClient::LeaseValid(absl::Time now) const {
  return welcomed_ && now < lease_start_ + options_.lease_timeout * 3 / 4;
}

void LeaseClient::OnGrant(const v1::Grant& grant) {
  RenewFrom(grant.report_seq());
  // A raise counts at the controller from the moment it sent it, and it sent it while this
  // worker's lease held there; once the lease is gone here, only lowers are taken.
  const bool valid = has_lease_ && LeaseValid(net::MonotonicNow());
  for (const auto& share : grant.shares()) {
    const int cap_now = CapFor(share.database());
    if (!valid && share.cap() > cap_now) continue;
    SetShare(share.database(), share.cap(), std::min(share.floor(), share.cap()));
  }
  if (valid) pending_ack_ = std::max(pending_ack_, grant.grant_seq());
  Tick();
}

int LeaseClient::CapFor(const std::string& database) const {
  auto it = shares_.find(database);
  return it == shares_.end() ? 0 : std::max(it->second.cap, 0);
}

void LeaseClient::SetShare(const std::string& database, int cap, int floor) {
  shares_[database] = Share{cap, std::max(floor, 0)};
  if (target_ != nullptr) target_->SetCap(database, std::max(cap, 0));
}

void LeaseClient::FallBackToFloors(const char* why) {
  has_lease_ = false;
  for (auto& [db, share] : shares_) {
    SetShare(db, std::min(std::max(share.cap, 0), share.floor), share.floor);
  }
  PGFLEET_LOG(kWarning, "controller_lease_lost", "why=", why,
              " since_ms=", absl::ToInt64Milliseconds(net::MonotonicNow() - lease_start_),
              " effect=\"shrinking to floors\"");
  // The stream, if it still seems alive, cannot be trusted: rejoin on a fresh one.
  if (stream_) stream_->Cancel();
}

void LeaseClient::Tick() {
  if (target_ == nullptr) return;
  const absl::Time now = net::MonotonicNow();
  const absl::Duration lease = options_.lease_timeout;
  if (has_lease_ && !LeaseValid(now)) FallBackToFloors("lease ran out");
  const bool lost = !has_lease_ && lease_start_ != absl::InfinitePast();
  const bool hard = lost && now >= lease_start_ + lease * 9 / 10;
  if (lost && now >= lease_start_ + options_.forget_after - lease) {
    for (auto& [db, share] : shares_) {
      if (share.cap > 0 || share.floor > 0) {
        PGFLEET_LOG(kWarning, "controller_forgot_us", "db=", db, " effect=\"share 0\"");
        SetShare(db, 0, 0);
      }
    }
  }
  bool under = true;
  for (const auto& usage : target_->Usages()) {
    int& peak = peak_demand_[usage.database];
    peak = std::max(peak, usage.demand);
    const int cap = CapFor(usage.database);
    int open = usage.open;
    if (open > cap) {
      const int closed = target_->Enforce(usage.database, hard);
      if (closed > 0) last_close_ = now;
      open -= closed;
    }
    int& previous = last_open_[usage.database];
    if (open < previous) last_close_ = now;  // busy servers closed on release
    previous = open;
    if (open > cap) under = false;
  }
  if (welcomed_ && has_lease_ && stream_ && pending_ack_ > acked_ && under &&
      now - last_close_ >= kSettle) {
    v1::WorkerMessage message;
    message.mutable_ack()->set_grant_seq(pending_ack_);
    FillDatabases(message.mutable_ack()->mutable_databases(), false);
    if (stream_->Send(std::move(message))) acked_ = pending_ack_;
  }
}

void LeaseClient::SendReport() {
  if (!welcomed_ || !stream_ || target_ == nullptr) return;
  const absl::Time now = net::MonotonicNow();
  // Sends older than a lease can no longer extend it.
  while (!report_sent_at_.empty() &&
         report_sent_at_.begin()->second < now - options_.lease_timeout) {
    report_sent_at_.erase(report_sent_at_.begin());
  }
  v1::WorkerMessage message;
  auto* report = message.mutable_report();
  report->set_report_seq(++report_seq_);
  FillDatabases(report->mutable_databases(), true);
  report_sent_at_[report_seq_] = now;
  stream_->Send(std::move(message));
  peak_demand_.clear();
}

void LeaseClient::FillDatabases(google::protobuf::RepeatedPtrField<v1::DatabaseState>* out,
                                bool with_demand) {
  if (target_ == nullptr) return;
  for (const auto& usage : target_->Usages()) {
    auto* db = out->Add();
    db->set_database(usage.database);
    db->set_budget(usage.budget);
    auto share = shares_.find(usage.database);
    db->set_cap(share == shares_.end() ? -1 : share->second.cap);
    db->set_floor(share == shares_.end() ? 0 : share->second.floor);
    db->set_open(usage.open);
    if (with_demand) {
      auto peak = peak_demand_.find(usage.database);
      db->set_demand(std::max(usage.demand, peak == peak_demand_.end() ? 0 : peak->second));
    }
  }
}

v1::WorkerMessage LeaseClient::BuildHello() {
  v1::WorkerMessage message;
  auto* hello = message.mutable_hello();
  hello->set_pod_id(identity_.pod_id);
  hello->set_local_peer_id(identity_.local_peer_id);
  hello->set_peer_id(peer_id_);
  hello->set_peering_address(identity_.peering_address);
  hello->set_pid(static_cast<uint32_t>(getpid()));
  hello->set_hostname(Hostname());
  FillDatabases(hello->mutable_databases(), true);
  for (const auto& member : directory_.members()) hello->add_known_members(member);
  for (const auto& pod : directory_.pods()) hello->add_known_blocks(pod.block());
  return message;
}

void LeaseClient::Leave(absl::Duration timeout) {
  if (leaving_) return;
  leaving_ = true;
  if (!stream_ || !welcomed_) return;
  // Every server was just closed: let PostgreSQL reap the backends before the room is freed.
  absl::SleepFor(kSettle);
  v1::WorkerMessage message;
  FillDatabases(message.mutable_leave()->mutable_databases(), false);
  if (stream_->Send(std::move(message)) && stream_->WaitDone(timeout)) {
    PGFLEET_LOG(kInfo, "controller_left", "peer_id=", peer_id_);
  }
  stream_->Cancel();
  stream_->WaitDone(absl::Milliseconds(200));
}

}  // namespace pgfleet::peering::controller
