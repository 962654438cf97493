// Summing WorkerStats.
#include "pooler/metrics/aggregate.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace pgfleet::metrics {
namespace {

using peering::v1::DurationHistogram;
using peering::v1::PeriodStats;
using peering::v1::PoolStats;
using peering::v1::WorkerStats;

void AddHistogram(const DurationHistogram& from, DurationHistogram* into) {
  while (into->counts_size() < from.counts_size()) into->add_counts(0);
  for (int i = 0; i < from.counts_size(); ++i) {
    into->set_counts(i, into->counts(i) + from.counts(i));
  }
  into->set_sum_us(into->sum_us() + from.sum_us());
  into->set_count(into->count() + from.count());
}

void AddPeriod(const PeriodStats& from, PeriodStats* into) {
  into->set_seconds(std::max(into->seconds(), from.seconds()));
  into->set_transactions(into->transactions() + from.transactions());
  into->set_queries(into->queries() + from.queries());
  into->set_received_bytes(into->received_bytes() + from.received_bytes());
  into->set_sent_bytes(into->sent_bytes() + from.sent_bytes());
  into->set_transaction_time_us(into->transaction_time_us() + from.transaction_time_us());
  into->set_query_time_us(into->query_time_us() + from.query_time_us());
  into->set_wait_time_us(into->wait_time_us() + from.wait_time_us());
  into->set_server_assignments(into->server_assignments() + from.server_assignments());
}

void AddPool(const PoolStats& from, AddMode mode, PoolStats* into) {
  if (into->pool_mode().empty()) into->set_pool_mode(from.pool_mode());
  if (mode == AddMode::kEverything) {
    into->set_client_active(into->client_active() + from.client_active());
    into->set_client_waiting(into->client_waiting() + from.client_waiting());
    into->set_client_idle(into->client_idle() + from.client_idle());
    into->set_client_welcome(into->client_welcome() + from.client_welcome());
    into->set_server_active(into->server_active() + from.server_active());
    into->set_server_idle(into->server_idle() + from.server_idle());
    into->set_server_used(into->server_used() + from.server_used());
    into->set_server_tested(into->server_tested() + from.server_tested());
    into->set_server_login(into->server_login() + from.server_login());
    into->set_server_being_canceled(into->server_being_canceled() + from.server_being_canceled());
    into->set_server_active_cancel(into->server_active_cancel() + from.server_active_cancel());
    into->set_max_wait_us(std::max(into->max_wait_us(), from.max_wait_us()));
    into->set_paused(into->paused() || from.paused());
    AddPeriod(from.period(), into->mutable_period());
  }
  into->set_transactions(into->transactions() + from.transactions());
  into->set_queries(into->queries() + from.queries());
  into->set_received_bytes(into->received_bytes() + from.received_bytes());
  into->set_sent_bytes(into->sent_bytes() + from.sent_bytes());
  into->set_transaction_time_us(into->transaction_time_us() + from.transaction_time_us());
  into->set_query_time_us(into->query_time_us() + from.query_time_us());
  into->set_wait_time_us(into->wait_time_us() + from.wait_time_us());
  into->set_server_assignments(into->server_assignments() + from.server_assignments());
  into->set_errors(into->errors() + from.errors());
  into->set_servers_handed_over(into->servers_handed_over() + from.servers_handed_over());
  into->set_servers_adopted(into->servers_adopted() + from.servers_adopted());
  into->set_server_pinned(into->server_pinned() + from.server_pinned());
  into->set_client_listening(into->client_listening() + from.client_listening());
  into->set_server_listening(into->server_listening() + from.server_listening());
  into->set_notifications_sent(into->notifications_sent() + from.notifications_sent());
  into->set_notifications_dropped(into->notifications_dropped() + from.notifications_dropped());
  for (int r = 0; r < from.pins_total_size(); ++r) {
    if (into->pins_total_size() <= r) into->add_pins_total(0);
    into->set_pins_total(r, into->pins_total(r) + from.pins_total(r));
  }
  AddHistogram(from.query_duration(), into->mutable_query_duration());
  AddHistogram(from.transaction_duration(), into->mutable_transaction_duration());
  AddHistogram(from.wait_duration(), into->mutable_wait_duration());
}

}  // namespace

void AddWorkerStats(const WorkerStats& from, AddMode mode, WorkerStats* into) {
  const bool gauges = mode == AddMode::kEverything;
  // Pools by (database, user).
  absl::flat_hash_map<std::pair<std::string, std::string>, int> pool_index;
  for (int i = 0; i < into->pools_size(); ++i) {
    pool_index[{into->pools(i).database(), into->pools(i).user()}] = i;
  }
  for (const PoolStats& p : from.pools()) {
    auto [it, inserted] = pool_index.try_emplace({p.database(), p.user()}, into->pools_size());
    PoolStats* target;
    if (inserted) {
      target = into->add_pools();
      target->set_database(p.database());
      target->set_user(p.user());
    } else {
      target = into->mutable_pools(it->second);
    }
    AddPool(p, mode, target);
  }
  // Budgets by database.
  for (const auto& b : from.budgets()) {
    peering::v1::BudgetShare* target = nullptr;
    for (auto& existing : *into->mutable_budgets()) {
      if (existing.database() == b.database()) target = &existing;
    }
    if (target == nullptr) {
      target = into->add_budgets();
      target->set_database(b.database());
    }
    target->set_max_db_connections(std::max(target->max_db_connections(), b.max_db_connections()));
    if (gauges) {
      target->set_share(target->share() + b.share());
      target->set_current(target->current() + b.current());
    }
  }
  // Hosts are a state, not a count: the live process's view (the one whose gauges count).
  if (gauges) {
    for (const auto& h : from.hosts()) *into->add_hosts() = h;
  }
  // Errors by class.
  for (const auto& e : from.errors()) {
    peering::v1::ErrorClassCount* target = nullptr;
    for (auto& existing : *into->mutable_errors()) {
      if (existing.sqlstate_class() == e.sqlstate_class()) target = &existing;
    }
    if (target == nullptr) {
      target = into->add_errors();
      target->set_sqlstate_class(e.sqlstate_class());
    }
    target->set_count(target->count() + e.count());
  }
  into->set_cancels_received(into->cancels_received() + from.cancels_received());
  into->set_cancels_forwarded(into->cancels_forwarded() + from.cancels_forwarded());
  into->set_cancels_sent(into->cancels_sent() + from.cancels_sent());
  into->set_cancels_dropped(into->cancels_dropped() + from.cancels_dropped());
  into->set_cancels_queued(into->cancels_queued() + from.cancels_queued());
  into->set_cancels_abandoned(into->cancels_abandoned() + from.cancels_abandoned());
  into->set_cancels_repeated(into->cancels_repeated() + from.cancels_repeated());
  into->set_clients_rejected(into->clients_rejected() + from.clients_rejected());
  into->set_login_failures(into->login_failures() + from.login_failures());
  into->set_protocol_errors(into->protocol_errors() + from.protocol_errors());
  into->set_clients_accepted(into->clients_accepted() + from.clients_accepted());
  into->set_servers_opened(into->servers_opened() + from.servers_opened());
  into->set_server_login_failures(into->server_login_failures() + from.server_login_failures());
  into->set_clients_rejected_hba(into->clients_rejected_hba() + from.clients_rejected_hba());
  into->set_clients_rejected_max_concurrent_logins(into->clients_rejected_max_concurrent_logins() +
                                                   from.clients_rejected_max_concurrent_logins());
  into->set_clients_rejected_tls_required(into->clients_rejected_tls_required() +
                                          from.clients_rejected_tls_required());
  into->set_tls_handshake_failures(into->tls_handshake_failures() + from.tls_handshake_failures());
  into->set_cancels_rate_limited(into->cancels_rate_limited() + from.cancels_rate_limited());
  into->set_servers_handed_over(into->servers_handed_over() + from.servers_handed_over());
  into->set_servers_adopted(into->servers_adopted() + from.servers_adopted());
  into->set_clients_balanced(into->clients_balanced() + from.clients_balanced());
  into->set_prepared_statements_prepared(into->prepared_statements_prepared() +
                                         from.prepared_statements_prepared());
  into->set_prepared_statements_hits(into->prepared_statements_hits() +
                                     from.prepared_statements_hits());
  into->set_prepared_statements_reprepares(into->prepared_statements_reprepares() +
                                           from.prepared_statements_reprepares());
  into->set_prepared_statements_evictions(into->prepared_statements_evictions() +
                                          from.prepared_statements_evictions());
  into->set_max_client_conn(std::max(into->max_client_conn(), from.max_client_conn()));
  if (gauges) {
    into->set_clients(into->clients() + from.clients());
    into->set_login_clients(into->login_clients() + from.login_clients());
    into->set_admin_clients(into->admin_clients() + from.admin_clients());
    into->set_rss_bytes(into->rss_bytes() + from.rss_bytes());
  }
}

uint64_t LoggedInServers(const WorkerStats& stats) {
  uint64_t n = 0;
  for (const auto& p : stats.pools()) {
    n += p.server_active() + p.server_idle() + p.server_tested() + p.server_used();
  }
  return n;
}

}  // namespace pgfleet::metrics
