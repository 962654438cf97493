// Metric families from the pod's stats.
#include "pooler/metrics/families.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pooler/conn/stats.h"
#include "pooler/metrics/names.h"

namespace pgfleet::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(std::string_view name, std::string_view help, MetricType type) {
  MetricFamily f;
  f.name = std::string(name);
  f.help = std::string(help);
  f.type = type;
  return f;
}

void AddValue(MetricFamily& f, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

void AddHistogram(MetricFamily& f, Labels labels, const peering::v1::DurationHistogram& h) {
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < pool::kDurationBuckets; ++i) {
    if (static_cast<int>(i) < h.counts_size()) cumulative += h.counts(static_cast<int>(i));
    ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < pool::kDurationBucketBoundsUs.size()
                        ? static_cast<double>(pool::kDurationBucketBoundsUs[i]) / 1e6
                        : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = h.count();
  m.histogram.sample_sum = static_cast<double>(h.sum_us()) / 1e6;
  f.metric.push_back(std::move(m));
}

using LabelledCounts = std::vector<std::pair<const char*, uint64_t>>;

// A counter family with a series per (label value, worker); `counts` reads one worker's values.
MetricFamily CountersByLabel(const PodView& view, std::string_view name, std::string_view help,
                             std::string_view label,
                             LabelledCounts (*counts)(const peering::v1::WorkerStats&)) {
  MetricFamily f = Family(name, help, MetricType::Counter);
  for (const auto& [slot, s] : view.slots) {
    const std::string worker = std::to_string(slot);
    for (const auto& [value, n] : counts(s)) {
      AddValue(f, {{std::string(label), value}, {std::string(names::kLabelWorker), worker}},
               static_cast<double>(n));
    }
  }
  return f;
}

Labels PoolLabels(const peering::v1::PoolStats& p, const std::string& worker) {
  return {{std::string(names::kLabelDatabase), p.database()},
          {std::string(names::kLabelUser), p.user()},
          {std::string(names::kLabelWorker), worker}};
}

}  // namespace

std::vector<MetricFamily> BuildFamilies(const PodView& view) {
  std::vector<MetricFamily> out;
  const std::string kWorker(names::kLabelWorker);

  auto build = Family(names::kBuildInfo, "pgfleet version (always 1).", MetricType::Gauge);
  AddValue(build, {{std::string(names::kLabelVersion), view.version}}, 1);
  out.push_back(std::move(build));
  auto up = Family(names::kUp,
                   "1 when every worker accepts clients and PostgreSQL is reachable (/readyz).",
                   MetricType::Gauge);
  AddValue(up, {}, view.up ? 1 : 0);
  out.push_back(std::move(up));
  auto workers = Family(names::kWorkers, "Worker processes accepting clients.", MetricType::Gauge);
  AddValue(workers, {}, view.workers_serving);
  out.push_back(std::move(workers));
  auto restarts =
      Family(names::kWorkerRestarts, "Workers restarted after they died.", MetricType::Counter);
  AddValue(restarts, {}, static_cast<double>(view.worker_restarts));
  out.push_back(std::move(restarts));

  // Pod-level limits: the largest any worker reports (they all read the same config).
  int64_t max_client_conn = -1;
  std::map<std::string, int64_t> max_db;
  for (const auto& [slot, s] : view.slots) {
    max_client_conn = std::max(max_client_conn, s.max_client_conn());
    for (const auto& b : s.budgets()) {
      auto [it, inserted] = max_db.try_emplace(b.database(), b.max_db_connections());
      if (!inserted) it->second = std::max(it->second, b.max_db_connections());
    }
  }
  if (max_client_conn >= 0) {
    auto f = Family(names::kMaxClientConn, "max_client_conn of the pod (0 = unlimited).",
                    MetricType::Gauge);
    AddValue(f, {}, static_cast<double>(max_client_conn));
    out.push_back(std::move(f));
  }
  auto max_db_family =
      Family(names::kBudgetMaxDbConnections,
             "Fleet-wide max_db_connections of each database (0 = unlimited).", MetricType::Gauge);
  for (const auto& [db, n] : max_db) {
    AddValue(max_db_family, {{std::string(names::kLabelDatabase), db}}, static_cast<double>(n));
  }
  out.push_back(std::move(max_db_family));

  struct PoolGauge {
    std::string_view name;
    std::string_view help;
    double (*value)(const peering::v1::PoolStats&);
  };
  static const PoolGauge kPoolGauges[] = {
      {names::kPoolsClientActive, "Clients linked to a server connection.",
       [](const peering::v1::PoolStats& p) { return double(p.client_active()); }},
      {names::kPoolsClientWaiting, "Clients waiting for a server connection.",
       [](const peering::v1::PoolStats& p) {
         return double(p.client_waiting()) + double(p.client_welcome());
       }},
      {names::kPoolsClientIdle, "Logged-in clients outside a transaction, with no server.",
       [](const peering::v1::PoolStats& p) { return double(p.client_idle()); }},
      {names::kPoolsServerActive, "Server connections linked to a client.",
       [](const peering::v1::PoolStats& p) { return double(p.server_active()); }},
      {names::kPoolsServerIdle, "Server connections idle and ready for a client.",
       [](const peering::v1::PoolStats& p) { return double(p.server_idle()); }},
      {names::kPoolsServerUsed, "Server connections idle past server_check_delay.",
       [](const peering::v1::PoolStats& p) { return double(p.server_used()); }},
      {names::kPoolsServerTesting,
       "Server connections running server_check_query, server_reset_query or a cancel.",
       [](const peering::v1::PoolStats& p) { return double(p.server_tested()); }},
      {names::kPoolsServerLogin, "Server connections connecting or logging in.",
       [](const peering::v1::PoolStats& p) { return double(p.server_login()); }},
      {names::kPoolsClientMaxWait, "How long the oldest waiting client has waited, in seconds.",
       [](const peering::v1::PoolStats& p) { return double(p.max_wait_us()) / 1e6; }},
      {names::kPoolsServerPinned,
       "Server connections pinned to a client by session state (temporary tables, SQL PREPARE, "
       "advisory locks, cursors WITH HOLD, LISTEN) in transaction pooling.",
       [](const peering::v1::PoolStats& p) { return double(p.server_pinned()); }},
      {names::kPoolsClientListening,
       "Clients listening through the worker's LISTEN hub (transaction pooling).",
       [](const peering::v1::PoolStats& p) { return double(p.client_listening()); }},
      {names::kPoolsServerListening,
       "Server connections the LISTEN hub holds to listen for clients (one per worker and pool "
       "while any client listens).",
       [](const peering::v1::PoolStats& p) { return double(p.server_listening()); }},
  };
  for (const auto& g : kPoolGauges) {
    auto f = Family(g.name, g.help, MetricType::Gauge);
    for (const auto& [slot, s] : view.slots) {
      const std::string worker = std::to_string(slot);
      for (const auto& p : s.pools()) AddValue(f, PoolLabels(p, worker), g.value(p));
    }
    out.push_back(std::move(f));
  }

  struct PoolCounter {
    std::string_view name;
    std::string_view help;
    uint64_t (*value)(const peering::v1::PoolStats&);
  };
  static const PoolCounter kPoolCounters[] = {
      {names::kStatsTransactions, "Transactions pooled (a server was released).",
       [](const peering::v1::PoolStats& p) { return p.transactions(); }},
      {names::kStatsQueries, "Queries pooled (a ReadyForQuery answered a client).",
       [](const peering::v1::PoolStats& p) { return p.queries(); }},
      {names::kStatsReceivedBytes, "Bytes received from clients.",
       [](const peering::v1::PoolStats& p) { return p.received_bytes(); }},
      {names::kStatsSentBytes, "Bytes sent to clients.",
       [](const peering::v1::PoolStats& p) { return p.sent_bytes(); }},
      {names::kNotificationsSent, "Notifications the LISTEN hub wrote to clients.",
       [](const peering::v1::PoolStats& p) { return p.notifications_sent(); }},
      {names::kNotificationsDropped,
       "Notifications dropped, oldest first, from the full queue of a client that did not read "
       "them.",
       [](const peering::v1::PoolStats& p) { return p.notifications_dropped(); }},
  };
  for (const auto& c : kPoolCounters) {
    auto f = Family(c.name, c.help, MetricType::Counter);
    for (const auto& [slot, s] : view.slots) {
      const std::string worker = std::to_string(slot);
      for (const auto& p : s.pools()) {
        AddValue(f, PoolLabels(p, worker), static_cast<double>(c.value(p)));
      }
    }
    out.push_back(std::move(f));
  }

  {
    static constexpr std::string_view kReasons[] = {"temp_table", "prepared_statement",
                                                    "advisory_lock", "hold_cursor", "listen"};
    auto f = Family(names::kSessionPins,
                    "Clients whose session state pinned their server, by what pinned it.",
                    MetricType::Counter);
    for (const auto& [slot, s] : view.slots) {
      const std::string worker = std::to_string(slot);
      for (const auto& p : s.pools()) {
        for (int r = 0; r < p.pins_total_size() && r < 5; ++r) {
          auto labels = PoolLabels(p, worker);
          labels.push_back({std::string(names::kLabelReason), std::string(kReasons[r])});
          AddValue(f, labels, static_cast<double>(p.pins_total(r)));
        }
      }
    }
    out.push_back(std::move(f));
  }

  struct PoolHistogram {
    std::string_view name;
    std::string_view help;
    const peering::v1::DurationHistogram& (*value)(const peering::v1::PoolStats&);
  };
  static const PoolHistogram kPoolHistograms[] = {
      {names::kStatsQueryDuration, "Query duration (query sent to ReadyForQuery), seconds.",
       [](const peering::v1::PoolStats& p) -> const auto& {return p.query_duration();
}
}  // namespace pgfleet::metrics
, {names::kStatsTransactionDuration, "Transaction duration (server linked to released), seconds.",
   [](const peering::v1::PoolStats& p) -> const auto& {return p.transaction_duration();
}
}
, {names::kStatsWaitDuration, "Time clients waited for a server connection, seconds.",
   [](const peering::v1::PoolStats& p) -> const auto& {return p.wait_duration();
}
}
,
}
;
for (const auto& h : kPoolHistograms) {
  auto f = Family(h.name, h.help, MetricType::Histogram);
  for (const auto& [slot, s] : view.slots) {
    const std::string worker = std::to_string(slot);
    for (const auto& p : s.pools()) AddHistogram(f, PoolLabels(p, worker), h.value(p));
  }
  out.push_back(std::move(f));
}

auto share =
    Family(names::kBudgetShare, "This worker's share of max_db_connections (0 = unlimited).",
           MetricType::Gauge);
for (const auto& [slot, s] : view.slots) {
  for (const auto& b : s.budgets()) {
    AddValue(share,
             {{std::string(names::kLabelDatabase), b.database()}, {kWorker, std::to_string(slot)}},
             static_cast<double>(b.share()));
  }
}
out.push_back(std::move(share));

auto serves = Family(names::kDatabaseHostServes,
                     "1 when new server connections may go to this host of the database: it is up "
                     "and its role fits target_session_attrs.",
                     MetricType::Gauge);
for (const auto& [slot, s] : view.slots) {
  for (const auto& h : s.hosts()) {
    AddValue(serves,
             {{std::string(names::kLabelDatabase), h.database()},
              {std::string(names::kLabelHost), h.host()},
              {std::string(names::kLabelPort), std::to_string(h.port())},
              {std::string(names::kLabelRole), h.role()},
              {kWorker, std::to_string(slot)}},
             h.fits() ? 1.0 : 0.0);
  }
}
out.push_back(std::move(serves));

struct WorkerCounter {
  std::string_view name;
  std::string_view help;
  uint64_t (*value)(const peering::v1::WorkerStats&);
};
static const WorkerCounter kWorkerCounters[] = {
    {names::kCancelReceived, "CancelRequests received from clients.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_received(); }},
    {names::kCancelForwarded, "CancelRequests forwarded to the worker that owns the session.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_forwarded(); }},
    {names::kCancelDropped, "CancelRequests dropped (unknown key, idle session, no owner).",
     [](const peering::v1::WorkerStats& s) { return s.cancels_dropped(); }},
    {names::kCancelQueued,
     "Queries cancelled while they waited for a server, answered by pgfleet without one.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_queued(); }},
    {names::kCancelAbandoned,
     "Queries cancelled in PostgreSQL because their client went away or was closed mid-query.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_abandoned(); }},
    {names::kCancelRepeated,
     "Further cancels sent for abandoned work that still ran after the cancel before it.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_repeated(); }},
    {names::kClientConnections, "Client connections accepted.",
     [](const peering::v1::WorkerStats& s) { return s.clients_accepted(); }},
    {names::kCancelRateLimited,
     "CancelRequests ignored because their source address exceeded pool.cancel_rate_limit.",
     [](const peering::v1::WorkerStats& s) { return s.cancels_rate_limited(); }},
    {names::kServerHandoffs,
     "Idle server connections handed to a sibling worker of the pod whose clients waited.",
     [](const peering::v1::WorkerStats& s) { return s.servers_handed_over(); }},
    {names::kClientsBalanced,
     "Client connections accepted by a worker and passed to a sibling worker with fewer clients "
     "(listen.balance_clients).",
     [](const peering::v1::WorkerStats& s) { return s.clients_balanced(); }},
};
for (const auto& c : kWorkerCounters) {
  auto f = Family(c.name, c.help, MetricType::Counter);
  for (const auto& [slot, s] : view.slots) {
    AddValue(f, {{kWorker, std::to_string(slot)}}, static_cast<double>(c.value(s)));
  }
  out.push_back(std::move(f));
}

auto errors =
    Family(names::kErrors, "Errors sent to clients, by SQLSTATE class.", MetricType::Counter);
for (const auto& [slot, s] : view.slots) {
  for (const auto& e : s.errors()) {
    AddValue(
        errors,
        {{std::string(names::kLabelClass), e.sqlstate_class()}, {kWorker, std::to_string(slot)}},
        static_cast<double>(e.count()));
  }
}
out.push_back(std::move(errors));

out.push_back(CountersByLabel(view, names::kClientsRejected,
                              "Clients refused or dropped before they were logged in, by reason.",
                              names::kLabelReason,
                              [](const peering::v1::WorkerStats& s) -> LabelledCounts {
                                return {{"max_client_conn", s.clients_rejected()},
                                        {"max_concurrent_logins",
                                         s.clients_rejected_max_concurrent_logins()},
                                        {"hba", s.clients_rejected_hba()},
                                        {"tls_required", s.clients_rejected_tls_required()},
                                        {"tls_handshake", s.tls_handshake_failures()},
                                        {"login_failed", s.login_failures()},
                                        {"protocol_error", s.protocol_errors()}};
                              }));
out.push_back(CountersByLabel(
    view, names::kPreparedStatements,
    "Prepared statement cache events: a client prepared a statement, a server had it (hit), had "
    "to prepare it again (reprepare), or dropped one to stay under max_prepared_statements "
    "(eviction).",
    names::kLabelEvent, [](const peering::v1::WorkerStats& s) -> LabelledCounts {
      return {{"prepared", s.prepared_statements_prepared()},
              {"hit", s.prepared_statements_hits()},
              {"reprepare", s.prepared_statements_reprepares()},
              {"eviction", s.prepared_statements_evictions()}};
    }));
return out;
}

}  // namespace pgfleet::metrics
