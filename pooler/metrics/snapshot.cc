// Worker stats snapshots.
#include "pooler/metrics/snapshot.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "pooler/base/log.h"
#include "pooler/config/worker_share.h"
#include "pooler/conn/client_conn.h"
#include "pooler/conn/server_conn.h"
#include "pooler/pool/pool.h"

namespace pgfleet::metrics {
namespace {

using peering::v1::ConnectionInfo;

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

// Loop (monotonic) time -> unix time, for connection timestamps shown to people.
absl::Time ToWallClock(absl::Time monotonic, absl::Time loop_now, absl::Time wall_now) {
  return wall_now - (loop_now - monotonic);
}

void SplitHostPort(const std::string& address, std::string* host, uint32_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    *host = address;
    *port = 0;
    return;
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = static_cast<uint32_t>(std::strtoul(address.c_str() + colon + 1, nullptr, 10));
}

void LocalAddress(int fd, ConnectionInfo* info) {
  if (fd < 0) return;
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    info->set_local_addr(host);
    info->set_local_port(ntohs(in->sin_port));
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    info->set_local_addr(host);
    info->set_local_port(ntohs(in6->sin6_port));
  } else {
    info->set_local_addr("unix");
  }
}

// PgBouncer 1.25's client states: login until logged in, "waiting" for a server, "active" while
// linked to one, else "idle".
std::string_view ClientStateForShow(pool::ClientState state) {
  switch (state) {
    case pool::ClientState::kIdle:
      return "idle";
    case pool::ClientState::kStartup:
    case pool::ClientState::kAuth:
    case pool::ClientState::kAuthQuery:
      return "login";
    case pool::ClientState::kSettingsCheck:
    case pool::ClientState::kWelcome:
    case pool::ClientState::kWaiting:
      return "waiting";
    default:
      return "active";
  }
}

std::string_view ServerStateForShow(pool::ServerState state) {
  switch (state) {
    case pool::ServerState::kConnecting:
    case pool::ServerState::kLogin:
      return "login";
    case pool::ServerState::kIdle:
      return "idle";
    case pool::ServerState::kActive:
      return "active";
    case pool::ServerState::kTesting:
      return "tested";
    case pool::ServerState::kListening:
      return "listening";
    case pool::ServerState::kCanceling:
    case pool::ServerState::kDraining:
      return "being_canceled";
    case pool::ServerState::kClosed:
      return "closed";
  }
  return "unknown";
}

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? uint64_t{resident} * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

void FillHistogram(const pool::DurationHistogram& h, peering::v1::DurationHistogram* out) {
  for (uint64_t c : h.counts) out->add_counts(c);
  out->set_sum_us(h.sum_us);
  out->set_count(h.count);
}

}  // namespace

WorkerStatsSource::WorkerStatsSource(pool::PoolRegistry& registry, uint32_t peer_id, int slot,
                                     int worker_count)
    : registry_(registry),
      peer_id_(peer_id),
      slot_(slot),
      worker_count_(worker_count),
      started_at_(absl::Now()),
      config_loaded_at_(absl::Now()),
      period_started_(registry.loop().now()) {}

WorkerStatsSource::~WorkerStatsSource() {
  if (timer_ != 0) registry_.loop().CancelTimer(timer_);
}

void WorkerStatsSource::Start() {
  timer_ = registry_.loop().RunEvery(absl::Seconds(1), [this] { Tick(); });
}

void WorkerStatsSource::SetFleetConfig(std::shared_ptr<const config::Config> fleet) {
  fleet_ = std::move(fleet);
  config_loaded_at_ = absl::Now();
}

void WorkerStatsSource::Tick() {
  const absl::Time now = registry_.loop().now();
  if (now - period_started_ < kStatsPeriod) return;
  last_period_.clear();
  for (const auto& [key, pool] : registry_.pools()) {
    const auto& st = pool->stats();
    PeriodCounters current{
        st.transactions,        st.queries,       st.received_bytes, st.sent_bytes,
        st.transaction_time_us, st.query_time_us, st.wait_time_us,   st.server_assignments};
    PeriodCounters& base = period_base_[key];
    last_period_[key] = PeriodCounters{current.transactions - base.transactions,
                                       current.queries - base.queries,
                                       current.received_bytes - base.received_bytes,
                                       current.sent_bytes - base.sent_bytes,
                                       current.transaction_time_us - base.transaction_time_us,
                                       current.query_time_us - base.query_time_us,
                                       current.wait_time_us - base.wait_time_us,
                                       current.server_assignments - base.server_assignments};
    base = current;
  }
  last_period_seconds_ = static_cast<uint64_t>(absl::ToInt64Seconds(now - period_started_));
  period_started_ = now;
}

void WorkerStatsSource::Fill(const peering::v1::GetWorkerStatsRequest& request,
                             peering::v1::WorkerStats* out) {
  const absl::Time now = registry_.loop().now();
  const absl::Time wall = absl::Now();
  const auto& counters = registry_.context().counters();
  out->set_peer_id(peer_id_);
  out->set_pid(static_cast<uint32_t>(getpid()));
  out->set_slot(static_cast<uint32_t>(slot_));
  out->set_ready(ready_);
  out->set_snapshot_time_ms(UnixMs(wall));
  out->set_started_at_ms(UnixMs(started_at_));
  out->set_config_loaded_at_ms(UnixMs(config_loaded_at_));
  out->set_clients(registry_.client_count());
  out->set_login_clients(static_cast<uint32_t>(registry_.login_client_count()));
  out->set_admin_clients(static_cast<uint32_t>(registry_.admin_clients().size()));
  out->set_max_client_conn(registry_.config().pool.max_client_conn);
  out->set_cancels_received(counters.cancels_received);
  out->set_cancels_forwarded(counters.cancels_forwarded);
  out->set_cancels_sent(counters.cancels_sent);
  out->set_cancels_dropped(counters.cancels_dropped);
  out->set_cancels_queued(counters.cancels_queued);
  out->set_cancels_abandoned(counters.cancels_abandoned);
  out->set_cancels_repeated(counters.cancels_repeated);
  out->set_clients_rejected(counters.clients_rejected_max_client_conn);
  out->set_login_failures(counters.login_failures);
  out->set_protocol_errors(counters.protocol_errors);
  out->set_clients_accepted(counters.clients_accepted);
  out->set_servers_opened(counters.servers_opened);
  out->set_server_login_failures(counters.server_login_failures);
  out->set_clients_rejected_hba(counters.clients_rejected_hba);
  out->set_clients_rejected_max_concurrent_logins(counters.clients_rejected_max_concurrent_logins);
  out->set_clients_rejected_tls_required(counters.clients_rejected_tls_required);
  out->set_tls_handshake_failures(counters.tls_handshake_failures);
  out->set_cancels_rate_limited(counters.cancels_rate_limited);
  out->set_servers_handed_over(counters.servers_handed_over);
  out->set_servers_adopted(counters.servers_adopted);
  out->set_clients_balanced(counters.clients_balanced);
  out->set_rss_bytes(ResidentBytes());
  for (size_t i = 0; i < counters.errors_by_class.size(); ++i) {
    if (counters.errors_by_class[i] == 0) continue;
    auto* e = out->add_errors();
    e->set_sqlstate_class(pool::WorkerCounters::SqlStateClassName(i));
    e->set_count(counters.errors_by_class[i]);
  }
  for (const std::string& db : registry_.pause_state().disabled()) {
    out->add_disabled_databases(db);
  }
  const auto& prepared = registry_.context().statements().counters();
  out->set_prepared_statements_prepared(prepared.prepared);
  out->set_prepared_statements_hits(prepared.hits);
  out->set_prepared_statements_reprepares(prepared.reprepares);
  out->set_prepared_statements_evictions(prepared.evictions);

  // database -> this worker's share: the pod's max_db_connections holds for all its workers
  // together, so the shares reported add up to it.
  std::map<std::string, int64_t> shares;
  for (const auto& [name, db] : registry_.config().databases) {
    if (name != "*")
      shares[name] = config::StrictShare(db.max_db_connections, slot_, worker_count_);
  }
  for (const auto& [key, pool] : registry_.pools()) {
    shares.try_emplace(key.first,
                       config::StrictShare(pool->db().max_db_connections, slot_, worker_count_));
    auto* p = out->add_pools();
    p->set_database(key.first);
    p->set_user(key.second);
    p->set_pool_mode(std::string(config::PoolModeName(pool->mode())));
    p->set_client_active(static_cast<uint32_t>(pool->active_client_count()));
    p->set_client_waiting(static_cast<uint32_t>(pool->waiting_count()));
    p->set_client_idle(static_cast<uint32_t>(pool->idle_client_count()));
    p->set_client_welcome(static_cast<uint32_t>(pool->welcome_client_count()));
    // PgBouncer's split: idle servers past server_check_delay are "used" (checked before their
    // next client); servers waiting for a cancel to land, or draining after their client left
    // mid-query, are "being canceled"; cancels on their way are "active cancel".
    uint32_t used = 0;
    uint32_t being_canceled = 0;
    uint32_t active_cancel = 0;
    if (pool->idle_server_count() > 0 || pool->testing_server_count() > 0 ||
        pool->active_server_count() > 0) {
      const auto& pc = registry_.config().pool;
      const bool checks =
          pc.server_check_delay >= absl::ZeroDuration() && pc.server_check_query != "-";
      pool->ForEachServer([&](const pool::ServerConn& s) {
        active_cancel += static_cast<uint32_t>(s.cancels_in_flight());
        if (s.state() == pool::ServerState::kIdle && checks &&
            now - s.last_used_at() > pc.server_check_delay) {
          ++used;
        } else if (s.state() == pool::ServerState::kCanceling ||
                   s.state() == pool::ServerState::kDraining) {
          ++being_canceled;
        }
      });
    }
    p->set_server_active(static_cast<uint32_t>(pool->active_server_count()));
    p->set_server_idle(static_cast<uint32_t>(pool->idle_server_count()) - used);
    p->set_server_used(used);
    p->set_server_tested(static_cast<uint32_t>(pool->testing_server_count()));
    p->set_server_being_canceled(being_canceled);
    p->set_server_active_cancel(active_cancel);
    p->set_server_login(static_cast<uint32_t>(pool->login_server_count()));
    p->set_max_wait_us(static_cast<uint64_t>(absl::ToInt64Microseconds(pool->max_wait(now))));
    p->set_paused(pool->paused());
    const auto& st = pool->stats();
    p->set_transactions(st.transactions);
    p->set_queries(st.queries);
    p->set_received_bytes(st.received_bytes);
    p->set_sent_bytes(st.sent_bytes);
    p->set_transaction_time_us(st.transaction_time_us);
    p->set_query_time_us(st.query_time_us);
    p->set_wait_time_us(st.wait_time_us);
    p->set_server_assignments(st.server_assignments);
    p->set_errors(st.errors);
    p->set_servers_handed_over(st.servers_handed_over);
    p->set_servers_adopted(st.servers_adopted);
    const pool::PinnedServers& pins = pool->pinned_servers();
    p->set_server_pinned(static_cast<uint32_t>(std::max(0, pins.pinned())));
    p->set_client_listening(static_cast<uint32_t>(pool->listening_client_count()));
    p->set_server_listening(static_cast<uint32_t>(pool->listening_server_count()));
    p->set_notifications_sent(st.notifications_sent);
    p->set_notifications_dropped(st.notifications_dropped);
    for (int r = 0; r < pool::kPinReasonCount; ++r) {
      p->add_pins_total(pins.pins_total(static_cast<pool::PinReason>(r)));
    }
    FillHistogram(st.query_duration, p->mutable_query_duration());
    FillHistogram(st.transaction_duration, p->mutable_transaction_duration());
    FillHistogram(st.wait_duration, p->mutable_wait_duration());
    auto period = last_period_.find(key);
    if (period != last_period_.end()) {
      auto* d = p->mutable_period();
      d->set_seconds(last_period_seconds_);
      d->set_transactions(period->second.transactions);
      d->set_queries(period->second.queries);
      d->set_received_bytes(period->second.received_bytes);
      d->set_sent_bytes(period->second.sent_bytes);
      d->set_transaction_time_us(period->second.transaction_time_us);
      d->set_query_time_us(period->second.query_time_us);
      d->set_wait_time_us(period->second.wait_time_us);
      d->set_server_assignments(period->second.server_assignments);
    }
  }
  for (const auto& [database, share] : shares) {
    auto* b = out->add_budgets();
    b->set_database(database);
    // This worker's even part of the pod's share from the controller when one is in force, else
    // of the config's budget, so that the workers' shares add up to the pod's.
    const std::optional<int> pod_cap = registry_.budget().DatabaseCap(database);
    const int64_t in_force = pod_cap.has_value()
                                 ? config::StrictShare(*pod_cap, slot_, worker_count_)
                                 : static_cast<int>(share);
    b->set_share(in_force < 0 ? 0 : in_force);
    int64_t total = 0;
    if (fleet_ != nullptr) {
      if (auto db = fleet_->FindDatabase(database); db.has_value()) total = db->max_db_connections;
    }
    b->set_max_db_connections(total);
    b->set_current(static_cast<uint32_t>(registry_.budget().DatabaseServerCount(database)));
  }
  for (const auto& [database, hosts] : registry_.host_selectors()) {
    for (size_t i = 0; i < hosts->size(); ++i) {
      const pool::HostStatus& h = hosts->status(i);
      auto* info = out->add_hosts();
      info->set_database(database);
      info->set_host(h.address.host);
      info->set_port(static_cast<uint32_t>(h.address.port));
      info->set_role(std::string(pool::HostRoleName(h.role)));
      info->set_up(now >= h.down_until);
      info->set_fits(hosts->Serves(i, now));
      info->set_target_session_attrs(
          std::string(config::TargetSessionAttrsName(hosts->target_session_attrs())));
      if (h.checked_at != absl::InfinitePast()) {
        info->set_checked_at_ms(UnixMs(ToWallClock(h.checked_at, now, wall)));
      }
      info->set_failures(static_cast<uint32_t>(h.failures));
      info->set_last_error(h.last_error);
    }
  }
  if (request.include_connections()) FillConnections(out);
}

void WorkerStatsSource::FillConnections(peering::v1::WorkerStats* out) {
  const absl::Time now = registry_.loop().now();
  const absl::Time wall = absl::Now();
  const int app_slot = registry_.context().tracked_params().Find("application_name");
  auto add_client = [&](const pool::ClientConn& c) {
    auto* info = out->add_clients_info();
    info->set_id(c.id());
    info->set_user(c.user());
    info->set_database(c.database());
    info->set_state(std::string(ClientStateForShow(c.state())));
    std::string host;
    uint32_t port = 0;
    SplitHostPort(c.peer_address(), &host, &port);
    info->set_addr(host);
    info->set_port(port);
    LocalAddress(c.fd(), info);
    info->set_connect_time_ms(UnixMs(ToWallClock(c.connected_at(), now, wall)));
    info->set_request_time_ms(UnixMs(ToWallClock(c.last_activity_at(), now, wall)));
    if (c.state() == pool::ClientState::kWaiting) {
      info->set_wait_us(
          static_cast<uint64_t>(absl::ToInt64Microseconds(now - c.wait_started_at())));
    }
    if (c.server() != nullptr) info->set_link(c.server()->id());
    if (c.tls_established()) info->set_tls(c.tls()->Description());
    if (app_slot >= 0 && c.params().IsSet(static_cast<size_t>(app_slot))) {
      info->set_application_name(std::string(c.params().Get(static_cast<size_t>(app_slot))));
    }
    info->set_pinned(c.session().DescribePins());
    if (c.pool() != nullptr) {
      info->set_listening(static_cast<uint32_t>(c.pool()->listen_hub().ChannelCount(&c)));
    }
  };
  registry_.ForEachWorkerClient(add_client);
  for (const auto& [key, pool] : registry_.pools()) {
    pool->ForEachClient(add_client);
    pool->ForEachServer([&](const pool::ServerConn& s) {
      auto* info = out->add_servers_info();
      info->set_id(s.id());
      info->set_user(s.pool()->server_user());
      info->set_database(s.pool()->db().name);
      info->set_state(std::string(ServerStateForShow(s.state())));
      info->set_addr(s.address().host);
      info->set_port(static_cast<uint32_t>(s.address().port));
      LocalAddress(s.fd(), info);
      if (s.tls_established()) info->set_tls(s.tls()->Description());
      info->set_connect_time_ms(UnixMs(ToWallClock(s.created_at(), now, wall)));
      info->set_request_time_ms(UnixMs(ToWallClock(s.last_used_at(), now, wall)));
      info->set_close_needed(s.close_on_release());
      if (s.client() != nullptr) info->set_link(s.client()->id());
      info->set_remote_pid(s.backend_pid());
      if (app_slot >= 0 && s.params().IsSet(static_cast<size_t>(app_slot))) {
        info->set_application_name(std::string(s.params().Get(static_cast<size_t>(app_slot))));
      }
    });
  }
}

SnapshotPublisher::SnapshotPublisher(net::EventLoop& loop, std::unique_ptr<SnapshotRegion> region,
                                     uint32_t slot, WorkerStatsSource& source)
    : loop_(loop), region_(std::move(region)), slot_(slot), source_(source) {}

SnapshotPublisher::~SnapshotPublisher() {
  if (timer_ != 0) loop_.CancelTimer(timer_);
}

void SnapshotPublisher::Start() {
  PublishNow();
  timer_ = loop_.RunEvery(kPublishInterval, [this] { PublishNow(); });
}

void SnapshotPublisher::PublishNow() {
  peering::v1::WorkerStats stats;
  source_.Fill(peering::v1::GetWorkerStatsRequest(), &stats);
  buffer_.clear();
  stats.SerializeToString(&buffer_);
  if (buffer_.size() > SnapshotRegion::capacity()) {
    // Too many pools for one slot: publish the worker's totals without per-pool series.
    if (!warned_too_big_) {
      PGFLEET_LOG(kWarning, "metrics_snapshot_too_big", "bytes=", buffer_.size(),
                  " pools=", stats.pools_size());
      warned_too_big_ = true;
    }
    stats.clear_pools();
    buffer_.clear();
    stats.SerializeToString(&buffer_);
  }
  (void)region_->Publish(slot_, buffer_);
}

}  // namespace pgfleet::metrics
