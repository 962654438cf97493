// Controller service: sessions, membership, blocks, leases and rebalancing.
#include "peering/controller/controller_service.h"

#include <deque>
#include <mutex>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/random.h"
#include "pooler/protocol/cancel_key.h"

namespace pgfleet::peering::controller {
namespace {

std::string MemberKey(const std::string& pod_id, uint32_t local) {
  return absl::StrCat(pod_id, "/", local);
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
      queue_.push_back(std::move(message));
      if (writing_) return;
      writing_ = true;
      start = &queue_.front();
      reactor = reactor_;
    }
    StartWrite(reactor, start);
  }

  // Ends the stream with `status` once pending writes are out.
  void Close(grpc::Status status) {
    Reactor* reactor = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (reactor_ == nullptr || finish_requested_) return;
      finish_requested_ = true;
      finish_status_ = std::move(status);
      if (writing_) return;  // OnWriteDone finishes
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
      if (!queue_.empty()) queue_.pop_front();
      if (!ok) queue_.clear();
      reactor = reactor_;
      if (!queue_.empty() && !finish_requested_) {
        next = &queue_.front();
      } else {
        writing_ = false;
        finish = finish_requested_;
      }
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
  std::deque<v1::ControllerMessage> queue_;  // front() is being written
  bool writing_ = false;
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
      allocator_(AllocatorOptions{options.min_share, absl::Seconds(1)}) {
  uint8_t bytes[8];
  base::SecureRandomBytes(bytes);
  instance_ = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  ApplyConfig(config);
  allocator_.set_raises_allowed(false);
}

ControllerService::~ControllerService() {
  if (tick_timer_ != 0) loop_.CancelTimer(tick_timer_);
}

void ControllerService::Start() {
  started_ = loop_.now();
  recovering_ = true;
  PGFLEET_LOG(kInfo, "controller_started", "instance=", instance_,
              " recovery_ms=", Ms(options_.lease_timeout));
  const absl::Duration tick =
      std::clamp(options_.renew_interval / 2, absl::Milliseconds(20), absl::Milliseconds(250));
  tick_timer_ = loop_.RunEvery(tick, [this] { Tick(); });
}

void ControllerService::ApplyConfig(const config::Config& config) {
  config_ = config;
  for (const auto& [name, db] : config_.databases) {
    if (name != "*" && db.max_db_connections > 0) allocator_.SetBudget(name, db.max_db_connections);
  }
  for (const auto& name : allocator_.Databases()) {
    auto db = config_.FindDatabase(name);
    if (db.has_value() && db->max_db_connections > 0) {
      allocator_.SetBudget(name, db->max_db_connections);
    }
  }
}

void ControllerService::EnsureBudget(const std::string& database, int reported_budget) {
  if (allocator_.Budget(database).has_value()) return;
  auto db = config_.FindDatabase(database);
  const int budget =
      db.has_value() && db->max_db_connections > 0 ? db->max_db_connections : reported_budget;
  if (budget > 0) allocator_.SetBudget(database, budget);
}

void ControllerService::CloseAll() {
  for (auto& [key, member] : members_) {
    if (member.session) {
      member.session->Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller stopping"));
    }
  }
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerMessage>* ControllerService::Lease(
    grpc::CallbackServerContext* context) {
  return new Reactor(this, context);
}

ControllerService::Member* ControllerService::MemberOf(const std::shared_ptr<Session>& session) {
  if (session->member_key.empty()) return nullptr;
  auto it = members_.find(session->member_key);
  if (it == members_.end() || it->second.session != session) return nullptr;
  return &it->second;
}

void ControllerService::OnMessage(const std::shared_ptr<Session>& session,
                                  const v1::WorkerMessage& message) {
  if (message.has_hello()) {
    OnHello(session, message.hello());
    return;
  }
  Member* member = MemberOf(session);
  if (member == nullptr) {
    session->Close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "send Hello first"));
    return;
  }
  if (message.has_report()) {
    OnReport(*member, message.report());
  } else if (message.has_ack()) {
    if (member->expired) return;
    ++stats_.acks;
    for (const auto& db : message.ack().databases()) member->open[db.database()] = db.open();
    allocator_.Ack(member->handle, message.ack().grant_seq());
    Rebalance();
  } else if (message.has_leave()) {
    OnLeave(*member, message.leave());
  }
}

uint32_t ControllerService::BlockFor(const std::string& pod_id, uint32_t claimed_block) {
  auto pod = pods_.find(pod_id);
  if (pod != pods_.end() && pod->second.block != 0) return pod->second.block;
  if (claimed_block != 0) {
    auto owner = blocks_.find(claimed_block);
    if (owner != blocks_.end() && owner->second != pod_id) {
      // Two live pods claim one block (possible only across a controller restart): keep both in
      // the directory; a cancel for the block goes to both and only its owner acts on it.
      PGFLEET_LOG(kWarning, "block_conflict", "block=", claimed_block, " pod=", pod_id,
                  " holder=", owner->second);
    } else {
      blocks_[claimed_block] = pod_id;
    }
    return claimed_block;
  }
  // A free block, the one freed longest ago first, never one a restarted controller heard of
  // from the workers' directories until forget_after has passed.
  const bool fresh_only = loop_.now() < started_ + options_.forget_after;
  uint32_t best = 0;
  absl::Time best_freed = absl::InfiniteFuture();
  for (uint32_t block = 1; block <= protocol::kMaxPodBlock; ++block) {
    if (blocks_.contains(block)) continue;
    if (fresh_only && reported_blocks_.contains(block)) continue;
    auto freed = freed_blocks_.find(block);
    const absl::Time when = freed == freed_blocks_.end() ? absl::InfinitePast() : freed->second;
    if (when < best_freed) {
      best = block;
      best_freed = when;
    }
  }
  if (best != 0) blocks_[best] = pod_id;
  return best;
}

void ControllerService::OnHello(const std::shared_ptr<Session>& session, const v1::Hello& hello) {
  const uint32_t local = hello.local_peer_id();
  if (hello.pod_id().empty() || local == 0 || local > protocol::kMaxLocalPeerId ||
      (hello.peer_id() != 0 && protocol::LocalPartOfPeerId(hello.peer_id()) != local) ||
      !session->member_key.empty()) {
    session->Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad Hello"));
    return;
  }
  const absl::Time now = loop_.now();
  const std::string key = MemberKey(hello.pod_id(), local);
  uint32_t peer_id = hello.peer_id();
  if (peer_id == 0) {
    const uint32_t block = BlockFor(hello.pod_id(), 0);
    if (block == 0) {
      PGFLEET_LOG(kError, "no_free_block", "pod=", hello.pod_id(),
                  " pods=", pods_.size());  // the worker's keys then name no pod
    }
    peer_id = protocol::MakePeerId(block, local);
  } else if (protocol::PodBlockOfPeerId(peer_id) != 0) {
    BlockFor(hello.pod_id(), protocol::PodBlockOfPeerId(peer_id));
  }
  const uint32_t block = protocol::PodBlockOfPeerId(peer_id);

  Member& member = members_[key];
  const bool rejoin = member.handle != 0;
  if (member.session && member.session != session) {
    member.session->Close(grpc::Status(grpc::StatusCode::ABORTED, "replaced by a newer stream"));
  }
  if (!rejoin) member.handle = next_handle_++;
  member.key = key;
  member.pod_id = hello.pod_id();
  member.local = local;
  member.peer_id = peer_id;
  member.address = hello.peering_address();
  member.hostname = hello.hostname();
  member.pid = hello.pid();
  member.session = session;
  member.last_heard = now;
  member.newest_report_seq = 0;
  member.expired = false;
  member.open.clear();
  member.sent_caps.clear();
  session->member_key = key;

  Pod& pod = pods_[hello.pod_id()];
  if (pod.block == 0) pod.block = block;
  if (!member.address.empty()) pod.address = member.address;
  pod.members.insert(key);

  std::map<std::string, HeldShare> held;
  for (const auto& db : hello.databases()) {
    EnsureBudget(db.database(), db.budget());
    held[db.database()] =
        HeldShare{std::max(db.cap(), 0), std::max(db.floor(), 0), std::max(db.open(), 0)};
    member.sent_caps[db.database()] = std::max(db.cap(), 0);
    member.open[db.database()] = db.open();
  }
  allocator_.AddWorker(member.handle, held);

  for (const auto& k : hello.known_members()) {
    if (!members_.contains(k) && recovering_) awaited_.insert(k);
  }
  if (hello.known_members_size() > 0) heard_membership_ = true;
  for (uint32_t b : hello.known_blocks()) reported_blocks_.insert(b);
  awaited_.erase(key);

  if (rejoin) {
    ++stats_.rejoins;
  } else {
    ++stats_.joins;
  }
  // A worker that already mints with an id (after a controller restart) reclaims it.
  PGFLEET_LOG(kInfo, rejoin ? "member_rejoined" : "member_joined", "member=", key,
              " peer_id=", peer_id, " block=", block,
              " reclaimed=", hello.peer_id() != 0 ? "true" : "false", " address=", member.address,
              " host=", base::LogQuote(member.hostname), " pid=", member.pid);
  v1::ControllerMessage welcome;
  auto* w = welcome.mutable_welcome();
  w->set_peer_id(peer_id);
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

void ControllerService::OnReport(Member& member, const v1::Report& report) {
  if (member.expired) {
    // Its lease ran out here, so it has fallen back to its floor: it must rejoin with a Hello
    // that says what it holds.
    member.session->Close(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "lease expired: rejoin"));
    return;
  }
  const absl::Time now = loop_.now();
  member.last_heard = now;
  member.newest_report_seq = std::max(member.newest_report_seq, report.report_seq());
  for (const auto& db : report.databases()) {
    EnsureBudget(db.database(), db.budget());
    allocator_.SetDemand(member.handle, db.database(), db.demand(), now);
    allocator_.SetOpen(member.handle, db.database(), db.open());
    member.open[db.database()] = db.open();
  }
  v1::ControllerMessage renewed;
  renewed.mutable_renewed()->set_report_seq(report.report_seq());
  member.session->Send(std::move(renewed));
}

void ControllerService::OnLeave(Member& member, const v1::Leave& leave) {
  bool closed = true;
  for (const auto& db : leave.databases()) closed = closed && db.open() == 0;
  auto session = member.session;
  const std::string key = member.key;
  if (closed) {
    ++stats_.leaves;
    PGFLEET_LOG(kInfo, "member_left", "member=", key, " peer_id=", member.peer_id);
    RemoveMember(key);
  } else {
    member.expired = true;
    allocator_.ExpireWorker(member.handle);
  }
  if (session) session->Close(grpc::Status::OK);
  BroadcastDirectory();
  Rebalance();
}

void ControllerService::OnSessionClosed(const std::shared_ptr<Session>& session) {
  Member* member = MemberOf(session);
  if (member == nullptr) return;
  member->session = nullptr;
  if (!member->expired) allocator_.DetachWorker(member->handle);
  PGFLEET_LOG(kInfo, "member_disconnected", "member=", member->key, " peer_id=", member->peer_id);
}

void ControllerService::RemoveMember(const std::string& key) {
  auto it = members_.find(key);
  if (it == members_.end()) return;
  allocator_.RemoveWorker(it->second.handle);
  auto pod = pods_.find(it->second.pod_id);
  if (pod != pods_.end()) {
    pod->second.members.erase(key);
    if (pod->second.members.empty()) {
      const uint32_t block = pod->second.block;
      auto owner = blocks_.find(block);
      if (owner != blocks_.end() && owner->second == pod->first) {
        blocks_.erase(owner);
        freed_blocks_[block] = loop_.now();
      }
      pods_.erase(pod);
    }
  }
  members_.erase(it);
}

void ControllerService::Tick() {
  const absl::Time now = loop_.now();
  bool membership_changed = false;
  std::vector<std::string> forget;
  for (auto& [key, member] : members_) {
    const absl::Duration silent = now - member.last_heard;
    if (!member.expired && silent > options_.lease_timeout) {
      member.expired = true;
      allocator_.ExpireWorker(member.handle);
      ++stats_.lease_expiries;
      PGFLEET_LOG(kWarning, "lease_expired", "member=", key, " peer_id=", member.peer_id,
                  " silent_ms=", absl::ToInt64Milliseconds(silent));
      if (member.session) {
        member.session->Close(
            grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "lease expired: rejoin"));
      }
    }
    if (member.expired && silent > options_.forget_after) forget.push_back(key);
  }
  for (const auto& key : forget) {
    PGFLEET_LOG(kInfo, "member_forgotten", "member=", key);
    ++stats_.forgotten;
    RemoveMember(key);
    membership_changed = true;
  }
  if (recovering_ &&
      (now >= started_ + options_.lease_timeout || (heard_membership_ && awaited_.empty()))) {
    recovering_ = false;
    PGFLEET_LOG(kInfo, "recovery_done", "members=", members_.size(), " absent=", awaited_.size(),
                " waited_ms=", absl::ToInt64Milliseconds(now - started_));
  }
  if (!awaited_.empty() && now >= started_ + options_.forget_after) awaited_.clear();
  allocator_.SetReserved(static_cast<int>(awaited_.size()) * options_.min_share);
  allocator_.set_raises_allowed(!recovering_);
  if (membership_changed) BroadcastDirectory();
  Rebalance();
}

void ControllerService::Rebalance() {
  std::map<uint32_t, Member*> by_handle;
  for (auto& [key, member] : members_) by_handle[member.handle] = &member;
  for (auto& grant : allocator_.Rebalance(loop_.now())) {
    auto it = by_handle.find(grant.worker);
    if (it == by_handle.end() || !it->second->session) continue;
    Member& member = *it->second;
    v1::ControllerMessage message;
    auto* g = message.mutable_grant();
    g->set_grant_seq(grant.seq);
    g->set_report_seq(member.newest_report_seq);
    for (const auto& share : grant.shares) {
      auto sent = member.sent_caps.find(share.database);
      const int before = sent == member.sent_caps.end() ? 0 : sent->second;
      if (share.cap > before) ++stats_.raises;
      if (share.cap < before) ++stats_.lowers;
      member.sent_caps[share.database] = share.cap;
      auto* s = g->add_shares();
      s->set_database(share.database);
      s->set_cap(share.cap);
      s->set_floor(share.floor);
      PGFLEET_LOG(kDebug, "share", "member=", member.key, " db=", share.database,
                  " cap=", share.cap, " floor=", share.floor, " seq=", grant.seq);
    }
    ++stats_.grants;
    member.session->Send(std::move(message));
  }
}

v1::Directory ControllerService::BuildDirectory() {
  v1::Directory directory;
  directory.set_epoch(++directory_epoch_);
  for (const auto& [pod_id, pod] : pods_) {
    auto* p = directory.add_pods();
    p->set_block(pod.block);
    p->set_peering_address(pod.address);
    for (const auto& key : pod.members) {
      auto it = members_.find(key);
      if (it != members_.end()) p->add_peer_ids(it->second.peer_id);
    }
  }
  for (const auto& [key, member] : members_) directory.add_members(key);
  return directory;
}

void ControllerService::BroadcastDirectory() {
  v1::ControllerMessage message;
  *message.mutable_directory() = BuildDirectory();
  for (auto& [key, member] : members_) {
    if (member.session) member.session->Send(message);
  }
}

std::vector<ControllerService::MemberView> ControllerService::Members() const {
  std::vector<MemberView> out;
  for (const auto& [key, member] : members_) {
    out.push_back({key, member.peer_id,
                   member.expired   ? "expired"
                   : member.session ? "live"
                                    : "detached",
                   member.address});
  }
  return out;
}

std::map<std::string, int> ControllerService::ReportedOpen() const {
  std::map<std::string, int> out;
  for (const auto& db : allocator_.Databases()) out[db] = 0;
  for (const auto& [key, member] : members_) {
    for (const auto& [db, open] : member.open) out[db] += open;
  }
  return out;
}

std::vector<ControllerService::ShareRow> ControllerService::Shares() const {
  std::vector<ShareRow> out;
  const auto databases = allocator_.Databases();
  for (const auto& [key, member] : members_) {
    for (const auto& db : databases) {
      auto share = allocator_.Share(member.handle, db);
      if (!share.has_value()) continue;
      auto open = member.open.find(db);
      out.push_back({db, key, member.peer_id, share->cap, share->floor,
                     open == member.open.end() ? 0 : open->second, share->demand});
    }
  }
  return out;
}

}  // namespace pgfleet::peering::controller
