// Worker lease plumbing: registration, the stream, reconnects, and LeaseState's timers.
#include "peering/controller/lease_client.h"

#include <unistd.h>

#include <algorithm>

#include "peering/grpc_callback_threads.h"
#include "peering/stream_write_queue.h"
#include "pooler/base/log.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {
namespace {

constexpr absl::Duration kTickInterval = absl::Milliseconds(25);
constexpr absl::Duration kSettle = LeaseState::kSettle;
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

void FillDatabases(const std::vector<DatabaseReport>& databases, bool with_demand,
                   google::protobuf::RepeatedPtrField<v1::DatabaseState>* out) {
  for (const auto& from : databases) {
    auto* db = out->Add();
    db->set_database(from.database);
    db->set_budget(from.budget);
    db->set_cap(from.cap);
    db->set_floor(from.floor);
    db->set_open(from.open);
    for (uint32_t pid : from.backend_pids) db->add_backend_pids(pid);
    if (with_demand) db->set_demand(from.demand);
  }
}

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
      // A write in flight keeps the hold (and so the reactor) until OnWriteDone.
      start = queue_.Push(std::move(message));
    }
    if (start != nullptr) StartWrite(start);
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
        release = !queue_.writing() && !hold_released_;
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
      closed_ = closed_ || !ok;
      next = queue_.OnWriteDone(!closed_);
      if (next == nullptr) {
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
  StreamWriteQueue<v1::WorkerMessage> queue_;
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
      state_(options.lease_timeout, options.forget_after),
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
  auto stream = std::make_shared<Stream>(loop_, this, generation_, registration_);
  if (stream_) {
    std::erase_if(retired_streams_, [](const auto& weak) { return weak.expired(); });
    retired_streams_.push_back(stream_);
  }
  stream_ = stream;
  v1::WorkerMessage hello = BuildHello();
  state_.OnHelloSent(net::MonotonicNow());
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
      const uint32_t peer_id = registration_->peer_id;
      state_.set_peer_id(peer_id);
      PGFLEET_LOG(kInfo, "controller_registered", "peer_id=", peer_id,
                  " block=", protocol::PodBlockOfPeerId(peer_id));
      return peer_id;
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
  state_.set_peer_id(identity_.local_peer_id);
  PGFLEET_LOG(kWarning, "controller_unreachable", "address=", options_.address,
              " peer_id=", identity_.local_peer_id,
              " effect=\"no budget share until it answers; keys name no pod\"");
  return identity_.local_peer_id;
}

void LeaseClient::Attach(CapTarget* target,
                         std::function<void(const v1::Directory&)> on_directory) {
  target_ = target != nullptr ? target : &no_databases_;
  on_directory_ = std::move(on_directory);
  state_.Attach(target_);
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
    const absl::Duration since_close = net::MonotonicNow() - state_.last_close();
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
  state_.OnStreamEnded();
  PGFLEET_LOG(kInfo, "controller_disconnected", "error=", base::LogQuote(error),
              " lease=", state_.has_lease() ? "kept" : "none");
  ScheduleReconnect();
}

void LeaseClient::OnMessage(uint64_t generation, const v1::ControllerMessage& message) {
  if (generation != generation_ || leaving_) return;
  if (message.has_welcome()) {
    const auto& w = message.welcome();
    LeaseState::Welcome welcome;
    welcome.peer_id = w.peer_id();
    if (w.lease_timeout_ms() > 0) welcome.lease_timeout = absl::Milliseconds(w.lease_timeout_ms());
    if (w.forget_after_ms() > 0) welcome.forget_after = absl::Milliseconds(w.forget_after_ms());
    const uint32_t ours = state_.peer_id();
    if (!state_.OnWelcome(welcome, net::MonotonicNow())) {
      PGFLEET_LOG(kError, "peer_id_mismatch", "ours=", ours, " controller=", w.peer_id());
      if (stream_) stream_->Cancel();
      return;
    }
    if (w.renew_interval_ms() > 0) {
      const absl::Duration interval = absl::Milliseconds(w.renew_interval_ms());
      if (interval != report_interval_ && report_timer_ != 0) {
        loop_.CancelTimer(report_timer_);
        report_timer_ = loop_.RunEvery(interval, [this] { SendReport(); });
      }
      report_interval_ = interval;
    }
    backoff_ = absl::Milliseconds(100);
    PGFLEET_LOG(kInfo, "controller_joined", "peer_id=", state_.peer_id(),
                " controller=", w.controller_instance(),
                " lease=", state_.has_lease() ? "yes" : "after renewal");
    SendReport();
  } else if (message.has_renewed()) {
    OnRenewed(message.renewed().report_seq());
  } else if (message.has_grant()) {
    OnGrant(message.grant());
  } else if (message.has_directory()) {
    directory_ = message.directory();
    if (on_directory_) on_directory_(directory_);
  }
}

void LeaseClient::OnRenewed(uint64_t report_seq) {
  if (state_.OnRenewed(report_seq, net::MonotonicNow())) {
    PGFLEET_LOG(kInfo, "controller_lease_renewed", "peer_id=", state_.peer_id());
  }
}

void LeaseClient::OnGrant(const v1::Grant& grant) {
  std::vector<ShareUpdate> shares;
  shares.reserve(grant.shares_size());
  for (const auto& share : grant.shares()) {
    shares.push_back(ShareUpdate{share.database(), share.cap(), share.floor()});
  }
  if (state_.OnGrant(grant.grant_seq(), grant.report_seq(), shares, net::MonotonicNow())) {
    PGFLEET_LOG(kInfo, "controller_lease_renewed", "peer_id=", state_.peer_id());
  }
  Tick();
}

void LeaseClient::Tick() {
  if (target_ == nullptr) return;
  const absl::Time now = net::MonotonicNow();
  LeaseState::TickOutcome outcome = state_.Tick(now, stream_ != nullptr);
  if (outcome.lease_lost) {
    PGFLEET_LOG(
        kWarning, "controller_lease_lost", "why=", "lease ran out",
        " since_ms=", absl::ToInt64Milliseconds(now - state_.lease_start()), " effect=",
        identity_.role == v1::LEASE_ROLE_WORKER_OF_POD ? "rejoining" : "\"shrinking to floors\"");
    // The stream, if it still seems alive, cannot be trusted: rejoin on a fresh one.
    if (stream_) stream_->Cancel();
  }
  for (const auto& db : outcome.forgotten) {
    PGFLEET_LOG(kWarning, "controller_forgot_us", "db=", db, " effect=\"share 0\"");
  }
  if (outcome.ack.has_value() && stream_) {
    v1::WorkerMessage message;
    message.mutable_ack()->set_grant_seq(*outcome.ack);
    FillDatabases(state_.Databases(false), false, message.mutable_ack()->mutable_databases());
    if (stream_->Send(std::move(message))) state_.MarkAcked(*outcome.ack);
  }
}

void LeaseClient::SendReport() {
  if (!stream_) return;
  std::optional<LeaseState::Report> next = state_.NextReport(net::MonotonicNow());
  if (!next.has_value()) return;
  v1::WorkerMessage message;
  auto* report = message.mutable_report();
  report->set_report_seq(next->seq);
  FillDatabases(next->databases, true, report->mutable_databases());
  stream_->Send(std::move(message));
}

v1::WorkerMessage LeaseClient::BuildHello() {
  v1::WorkerMessage message;
  auto* hello = message.mutable_hello();
  hello->set_pod_id(identity_.pod_id);
  hello->set_local_peer_id(identity_.local_peer_id);
  hello->set_peer_id(state_.peer_id());
  hello->set_peering_address(identity_.peering_address);
  hello->set_pid(static_cast<uint32_t>(getpid()));
  hello->set_hostname(Hostname());
  hello->set_role(identity_.role);
  FillDatabases(state_.Databases(true), true, hello->mutable_databases());
  for (const auto& member : directory_.members()) hello->add_known_members(member);
  for (const auto& pod : directory_.pods()) hello->add_known_blocks(pod.block());
  return message;
}

void LeaseClient::Leave(absl::Duration timeout) {
  if (leaving_) return;
  leaving_ = true;
  if (!stream_ || !state_.welcomed()) return;
  // Every server was just closed: let PostgreSQL reap the backends before the room is freed.
  absl::SleepFor(kSettle);
  v1::WorkerMessage message;
  FillDatabases(state_.Databases(false), false, message.mutable_leave()->mutable_databases());
  if (stream_->Send(std::move(message)) && stream_->WaitDone(timeout)) {
    PGFLEET_LOG(kInfo, "controller_left", "peer_id=", state_.peer_id());
  }
  stream_->Cancel();
  stream_->WaitDone(absl::Milliseconds(200));
}

}  // namespace pgfleet::peering::controller
