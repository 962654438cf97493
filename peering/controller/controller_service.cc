// Controller service plumbing: sessions, messages and timers around Membership.
#include "peering/controller/controller_service.h"

#include <mutex>

#include "absl/strings/escaping.h"
#include "peering/stream_write_queue.h"
#include "pooler/base/log.h"
#include "pooler/base/random.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {
namespace {

template <typename Databases>
std::vector<DatabaseReport> FromWire(const Databases& databases) {
  std::vector<DatabaseReport> out;
  out.reserve(databases.size());
  for (const auto& db : databases) {
    out.push_back(DatabaseReport{db.database(),
                                 db.budget(),
                                 db.cap(),
                                 db.floor(),
                                 db.open(),
                                 db.demand(),
                                 {db.backend_pids().begin(), db.backend_pids().end()}});
  }
  return out;
}

uint32_t Ms(absl::Duration d) { return static_cast<uint32_t>(absl::ToInt64Milliseconds(d)); }

}  // namespace

// What the loop and a stream's reactor share: an outgoing queue (one write in flight at a time,
// as gRPC requires) and the finish. Thread-safe. gRPC may run a reaction inline inside a Start*
// call, so the mutex is never held across one.
class ControllerService::Session {
 public:
  explicit Session(std::string peer) : peer_(std::move(peer)) {}

  void Send(v1::ControllerMessage message) {
    const v1::ControllerMessage* start = nullptr;
    Reactor* reactor = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (reactor_ == nullptr || finish_requested_) return;
      start = queue_.Push(std::move(message));
      reactor = reactor_;
    }
    if (start != nullptr) StartWrite(reactor, start);
  }

  // Ends the stream with `status` once pending writes are out.
  void Close(grpc::Status status) {
    Reactor* reactor = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (reactor_ == nullptr || finish_requested_) return;
      finish_requested_ = true;
      finish_status_ = std::move(status);
      if (queue_.writing()) return;  // OnWriteDone finishes
      reactor = reactor_;
    }
    Finish(reactor);
  }

  const std::string& peer() const { return peer_; }
  // Loop thread only.
  std::string member_key;

 private:
  friend class ControllerService::Reactor;

  void Attach(Reactor* reactor) {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = reactor;
  }
  void OnWriteDone(bool ok) {
    const v1::ControllerMessage* next = nullptr;
    Reactor* reactor = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reactor = reactor_;
      next = queue_.OnWriteDone(ok && !finish_requested_);
      finish = next == nullptr && finish_requested_;
    }
    if (next != nullptr) StartWrite(reactor, next);
    if (finish) Finish(reactor);
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
  }
  void StartWrite(Reactor* reactor, const v1::ControllerMessage* message);
  void Finish(Reactor* reactor);

  std::mutex mu_;
  Reactor* reactor_ = nullptr;
  StreamWriteQueue<v1::ControllerMessage> queue_;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
  std::string peer_;
};

class ControllerService::Reactor final
    : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerMessage> {
 public:
  Reactor(ControllerService* service, grpc::CallbackServerContext* context)
      : service_(service), session_(std::make_shared<Session>(context->peer())) {
    session_->Attach(this);
    if (!service_->credentials_.Check(*context)) {
      PGFLEET_LOG(kWarning, "lease_refused", "peer=", base::LogQuote(context->peer()),
                  " reason=bad_token");
      service_->loop_.Post([service = service_] { ++service->stats_.refused_calls; });
      session_->Close(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid peering token"));
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      session_->Close(grpc::Status::OK);
      return;
    }
    service_->loop_.Post([service = service_, session = session_, message = in_] {
      service->OnMessage(session, message);
    });
    StartRead(&in_);
  }
  void OnWriteDone(bool ok) override { session_->OnWriteDone(ok); }
  void OnDone() override {
    session_->Detach();
    service_->loop_.Post(
        [service = service_, session = session_] { service->OnSessionClosed(session); });
    delete this;
  }

 private:
  ControllerService* service_;
  std::shared_ptr<Session> session_;
  v1::WorkerMessage in_;
};

void ControllerService::Session::StartWrite(Reactor* reactor,
                                            const v1::ControllerMessage* message) {
  reactor->StartWrite(message);
}

void ControllerService::Session::Finish(Reactor* reactor) {
  grpc::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    status = finish_status_;
  }
  reactor->Finish(status);
}

ControllerService::ControllerService(net::EventLoop& loop, const config::Config& config,
                                     const ControllerOptions& options,
                                     const PeerCredentials& credentials)
    : loop_(loop),
      options_(options),
      credentials_(credentials),
      membership_(MembershipOptions{options.lease_timeout, options.forget_after, options.min_share,
                                    std::min(options.lost_room_hold, options.forget_after),
                                    /*backends_checked=*/!options.monitor.empty()}) {
  uint8_t bytes[8];
  base::SecureRandomBytes(bytes);
  instance_ = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  ApplyConfig(config);
  if (!options.monitor.empty()) {
    std::weak_ptr<bool> alive = alive_;
    monitor_ = std::make_unique<BackendMonitor>(
        options.monitor, [this, alive](BackendMonitor::Answer answer) {
          loop_.Post([this, alive, answer = std::move(answer)] {
            if (alive.lock()) OnMonitorAnswer(answer);
          });
        });
  }
}

ControllerService::~ControllerService() {
  monitor_.reset();  // joins its thread: no answer is posted after this
  alive_.reset();
  if (tick_timer_ != 0) loop_.CancelTimer(tick_timer_);
}

void ControllerService::Start() {
  membership_.Start(loop_.now());
  PGFLEET_LOG(kInfo, "controller_started", "instance=", instance_,
              " recovery_ms=", Ms(options_.lease_timeout));
  const absl::Duration tick =
      std::clamp(options_.renew_interval / 2, absl::Milliseconds(20), absl::Milliseconds(250));
  tick_timer_ = loop_.RunEvery(tick, [this] { Tick(); });
}

void ControllerService::ApplyConfig(const config::Config& config) {
  BudgetAllocator& allocator = membership_.allocator();
  config_ = config;
  for (const auto& [name, db] : config_.databases) {
    if (name != "*" && db.max_db_connections > 0) allocator.SetBudget(name, db.max_db_connections);
  }
  for (const auto& name : allocator.Databases()) {
    auto db = config_.FindDatabase(name);
    if (db.has_value() && db->max_db_connections > 0) {
      allocator.SetBudget(name, db->max_db_connections);
    }
  }
}

void ControllerService::EnsureBudget(const std::string& database, int reported_budget) {
  BudgetAllocator& allocator = membership_.allocator();
  if (allocator.Budget(database).has_value()) return;
  auto db = config_.FindDatabase(database);
  const int budget =
      db.has_value() && db->max_db_connections > 0 ? db->max_db_connections : reported_budget;
  if (budget > 0) allocator.SetBudget(database, budget);
}

void ControllerService::CloseAll() {
  for (auto& [key, session] : sessions_) {
    session->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller stopping"));
  }
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerMessage>* ControllerService::Lease(
    grpc::CallbackServerContext* context) {
  return new Reactor(this, context);
}

const Membership::Member* ControllerService::MemberOf(
    const std::shared_ptr<Session>& session) const {
  if (session->member_key.empty()) return nullptr;
  auto it = sessions_.find(session->member_key);
  if (it == sessions_.end() || it->second != session) return nullptr;
  return membership_.Find(session->member_key);
}

void ControllerService::OnMessage(const std::shared_ptr<Session>& session,
                                  const v1::WorkerMessage& message) {
  if (message.has_hello()) {
    OnHello(session, message.hello());
    return;
  }
  if (MemberOf(session) == nullptr) {
    session->Close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "send Hello first"));
    return;
  }
  if (message.has_report()) {
    OnReport(session, message.report());
  } else if (message.has_ack()) {
    if (!membership_.Ack(session->member_key, message.ack().grant_seq(),
                         FromWire(message.ack().databases()))) {
      return;
    }
    ++stats_.acks;
    Rebalance();
  } else if (message.has_leave()) {
    OnLeave(session, message.leave());
  }
}

void ControllerService::OnHello(const std::shared_ptr<Session>& session, const v1::Hello& hello) {
  if (!session->member_key.empty()) {
    session->Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad Hello"));
    return;
  }
  JoinRequest request;
  request.pod_id = hello.pod_id();
  request.local_peer_id = hello.local_peer_id();
  request.peer_id = hello.peer_id();
  request.address = hello.peering_address();
  request.hostname = hello.hostname();
  request.pid = hello.pid();
  request.databases = FromWire(hello.databases());
  request.known_members.assign(hello.known_members().begin(), hello.known_members().end());
  request.known_blocks.assign(hello.known_blocks().begin(), hello.known_blocks().end());
  switch (hello.role()) {
    case v1::LEASE_ROLE_WORKER_OF_POD:
      request.role = JoinRequest::Role::kWorkerOfPod;
      request.databases.clear();  // its pod's lease counts its servers
      break;
    case v1::LEASE_ROLE_POD:
      request.role = JoinRequest::Role::kPod;
      break;
    default:
      request.role = JoinRequest::Role::kWorker;
  }
  if (!Membership::IsValid(request)) {
    session->Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad Hello"));
    return;
  }
  for (const auto& db : request.databases) EnsureBudget(db.database, db.budget);
  std::optional<Membership::Joined> joined = membership_.Join(request, loop_.now());
  if (!joined.has_value()) return;  // IsValid said it would join
  if (!joined->conflict_holder.empty()) {
    PGFLEET_LOG(kWarning, "block_conflict", "block=", joined->block, " pod=", request.pod_id,
                " holder=", joined->conflict_holder);
  }
  if (!joined->reclaimed && joined->block == 0 && request.role != JoinRequest::Role::kPod) {
    PGFLEET_LOG(kError, "no_free_block", "pod=", request.pod_id,
                " pods=", membership_.pods().size());  // the worker's keys then name no pod
  }
  std::shared_ptr<Session>& current = sessions_[joined->key];
  if (current && current != session) {
    current->Close(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream"));
  }
  current = session;
  session->member_key = joined->key;

  if (joined->rejoin) {
    ++stats_.rejoins;
  } else {
    ++stats_.joins;
  }
  // A worker that already mints with an id (after a controller restart) reclaims it.
  PGFLEET_LOG(kInfo, joined->rejoin ? "member_rejoined" : "member_joined", "member=", joined->key,
              " peer_id=", joined->peer_id, " block=", joined->block,
              " reclaimed=", joined->reclaimed ? "true" : "false", " address=", request.address,
              " host=", base::LogQuote(request.hostname), " pid=", request.pid);
  v1::ControllerMessage welcome;
  auto* w = welcome.mutable_welcome();
  w->set_peer_id(joined->peer_id);
  w->set_lease_timeout_ms(Ms(options_.lease_timeout));
  w->set_renew_interval_ms(Ms(options_.renew_interval));
  w->set_forget_after_ms(Ms(options_.forget_after));
  w->set_controller_instance(instance_);
  session->Send(std::move(welcome));
  // Everyone learns of the member before it is granted anything, so that a controller started
  // after a crash hears of it from the others.
  BroadcastDirectory();
  Rebalance();
}

void ControllerService::OnReport(const std::shared_ptr<Session>& session,
                                 const v1::Report& report) {
  std::vector<DatabaseReport> databases = FromWire(report.databases());
  for (const auto& db : databases) EnsureBudget(db.database, db.budget);
  if (!membership_.Report(session->member_key, report.report_seq(), databases, loop_.now())) {
    // Its lease ran out here, so it has fallen back to its floor: it must rejoin with a Hello
    // that says what it holds.
    session->Close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "lease expired: rejoin"));
    return;
  }
  v1::ControllerMessage renewed;
  renewed.mutable_renewed()->set_report_seq(report.report_seq());
  session->Send(std::move(renewed));
}

void ControllerService::OnLeave(const std::shared_ptr<Session>& session, const v1::Leave& leave) {
  const std::string key = session->member_key;
  const uint32_t peer_id = MemberOf(session)->peer_id;
  if (membership_.Leave(key, FromWire(leave.databases()), loop_.now())) {
    ++stats_.leaves;
    PGFLEET_LOG(kInfo, "member_left", "member=", key, " peer_id=", peer_id);
    sessions_.erase(key);
  }
  session->Close(grpc::Status::OK);
  BroadcastDirectory();
  Rebalance();
}

void ControllerService::OnSessionClosed(const std::shared_ptr<Session>& session) {
  const Membership::Member* member = MemberOf(session);
  if (member == nullptr) return;
  sessions_.erase(member->key);
  membership_.Detach(member->key);
  PGFLEET_LOG(kInfo, "member_disconnected", "member=", member->key, " peer_id=", member->peer_id);
}

void ControllerService::Tick() {
  const absl::Time now = loop_.now();
  Membership::TickOutcome outcome = membership_.Tick(now);
  for (const auto& expired : outcome.expired) {
    ++stats_.lease_expiries;
    PGFLEET_LOG(kWarning, "lease_expired", "member=", expired.key, " peer_id=", expired.peer_id,
                " silent_ms=", absl::ToInt64Milliseconds(expired.silent));
    auto session = sessions_.find(expired.key);
    if (session != sessions_.end()) {
      session->second->Close(
          grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "lease expired: rejoin"));
    }
  }
  for (const auto& key : outcome.forgotten) {
    PGFLEET_LOG(kInfo, "member_forgotten", "member=", key);
    ++stats_.forgotten;
    sessions_.erase(key);
  }
  if (outcome.recovery_done) {
    PGFLEET_LOG(kInfo, "recovery_done", "members=", membership_.members().size(),
                " absent=", membership_.awaited(),
                " waited_ms=", absl::ToInt64Milliseconds(now - membership_.started()));
  }
  if (!outcome.forgotten.empty()) BroadcastDirectory();
  AskMonitor();
  Rebalance();
}

void ControllerService::AskMonitor() {
  if (monitor_ == nullptr) return;
  const std::vector<Membership::LostBackend> lost = membership_.LostBackends();
  if (lost.empty()) return;
  const absl::Time now = loop_.now();
  std::vector<BackendMonitor::Backend> backends;
  for (const auto& backend : lost) {
    backends.push_back(BackendMonitor::Backend{backend.pid, now - backend.last_heard});
  }
  monitor_->Ask(std::move(backends), options_.terminate_lost_backends);
}

void ControllerService::OnMonitorAnswer(const BackendMonitor::Answer& answer) {
  if (!answer.listed.ok()) {
    if (!monitor_failing_) {
      PGFLEET_LOG(kWarning, "monitor_failed",
                  "error=", base::LogQuote(base::Sv(answer.listed.status().message())),
                  " effect=\"a lost pod's room stays counted until controller.lost_room_hold\"");
    }
    monitor_failing_ = true;
    return;
  }
  if (monitor_failing_) {
    PGFLEET_LOG(kInfo, "monitor_recovered", "effect=\"lost pods' backends are checked again\"");
  }
  monitor_failing_ = false;
  if (answer.terminated > 0) {
    PGFLEET_LOG(kWarning, "lost_backends_terminated", "count=", answer.terminated);
  }
  const int gone = membership_.BackendsListed(answer.asked, *answer.listed, loop_.now());
  if (gone > 0) {
    PGFLEET_LOG(kInfo, "lost_backends_gone", "gone=", gone, " still_listed=", answer.listed->size(),
                " effect=\"their room may be granted again\"");
  }
  Rebalance();
}

void ControllerService::Rebalance() {
  for (auto& grant : membership_.Rebalance(loop_.now())) {
    auto session = sessions_.find(grant.key);
    if (session == sessions_.end()) continue;
    v1::ControllerMessage message;
    auto* g = message.mutable_grant();
    g->set_grant_seq(grant.grant_seq);
    g->set_report_seq(grant.report_seq);
    for (const auto& share : grant.shares) {
      auto* s = g->add_shares();
      s->set_database(share.database);
      s->set_cap(share.cap);
      s->set_floor(share.floor);
      PGFLEET_LOG(kDebug, "share", "member=", grant.key, " db=", share.database, " cap=", share.cap,
                  " floor=", share.floor, " seq=", grant.grant_seq);
    }
    stats_.raises += grant.raises;
    stats_.lowers += grant.lowers;
    ++stats_.grants;
    session->second->Send(std::move(message));
  }
}

v1::Directory ControllerService::BuildDirectory() {
  v1::Directory directory;
  directory.set_epoch(++directory_epoch_);
  const auto& members = membership_.members();
  for (const auto& [pod_id, pod] : membership_.pods()) {
    auto* p = directory.add_pods();
    p->set_block(pod.block);
    p->set_peering_address(pod.address);
    for (const auto& key : pod.members) {
      auto it = members.find(key);
      if (it != members.end()) p->add_peer_ids(it->second.peer_id);
    }
  }
  for (const auto& [key, member] : members) directory.add_members(key);
  return directory;
}

void ControllerService::BroadcastDirectory() {
  v1::ControllerMessage message;
  *message.mutable_directory() = BuildDirectory();
  for (auto& [key, session] : sessions_) session->Send(message);
}

std::vector<ControllerService::MemberView> ControllerService::Members() const {
  std::vector<MemberView> out;
  for (const auto& [key, member] : membership_.members()) {
    out.push_back({key, member.peer_id,
                   member.expired     ? "expired"
                   : member.connected ? "live"
                                      : "detached",
                   member.address});
  }
  return out;
}

std::map<std::string, int> ControllerService::ReportedOpen() const {
  std::map<std::string, int> out;
  for (const auto& db : membership_.allocator().Databases()) out[db] = 0;
  for (const auto& [key, member] : membership_.members()) {
    for (const auto& [db, open] : member.open) out[db] += open;
  }
  return out;
}

std::vector<ControllerService::ShareRow> ControllerService::Shares() const {
  std::vector<ShareRow> out;
  const auto databases = membership_.allocator().Databases();
  for (const auto& [key, member] : membership_.members()) {
    for (const auto& db : databases) {
      auto share = membership_.allocator().Share(member.handle, db);
      if (!share.has_value()) continue;
      auto open = member.open.find(db);
      out.push_back({db, key, member.peer_id, share->cap, share->floor,
                     open == member.open.end() ? 0 : open->second, share->demand});
    }
  }
  return out;
}

}  // namespace pgfleet::peering::controller
