// Every metric name pgfleet exports, in one place. deploy/grafana/pgfleet.json and
// deploy/prometheus/alerts.yaml query exactly these names (tests/helm/checks.py keeps the list the
// dashboard may use in step, and tests/integration/metrics_test.cc checks that /metrics serves
// each one). Names follow the PgBouncer exporter's (pgbouncer_pools_*, pgbouncer_stats_*).
//
// Labels: series of a worker's pools carry {database, user, worker}; other per-worker series
// carry {worker} (the worker slot, 0..workers-1, stable across restarts: a restarted worker's
// counters continue from its predecessor's). Pod totals are sums over `worker`. Pod-level series
// (build info, up, workers, restarts, configured limits) have no worker label.
#pragma once

#include <string_view>

namespace pgfleet::metrics::names {

// Pod level.
inline constexpr std::string_view kBuildInfo = "pgfleet_build_info";  // {version} = 1
inline constexpr std::string_view kUp = "pgfleet_up";            // 1 when /readyz would say ready
inline constexpr std::string_view kWorkers = "pgfleet_workers";  // worker processes serving
inline constexpr std::string_view kWorkerRestarts = "pgfleet_worker_restarts_total";
inline constexpr std::string_view kMaxClientConn = "pgfleet_max_client_conn";
inline constexpr std::string_view kBudgetMaxDbConnections =
    "pgfleet_budget_max_db_connections";  // {database}: the fleet-wide budget

// Pools {database, user, worker} (gauges, like SHOW POOLS).
inline constexpr std::string_view kPoolsClientActive = "pgfleet_pools_client_active_connections";
inline constexpr std::string_view kPoolsClientWaiting = "pgfleet_pools_client_waiting_connections";
inline constexpr std::string_view kPoolsClientIdle = "pgfleet_pools_client_idle_connections";
inline constexpr std::string_view kPoolsServerActive = "pgfleet_pools_server_active_connections";
inline constexpr std::string_view kPoolsServerIdle = "pgfleet_pools_server_idle_connections";
inline constexpr std::string_view kPoolsServerUsed = "pgfleet_pools_server_used_connections";
inline constexpr std::string_view kPoolsServerTesting = "pgfleet_pools_server_testing_connections";
inline constexpr std::string_view kPoolsServerLogin = "pgfleet_pools_server_login_connections";
inline constexpr std::string_view kPoolsClientMaxWait = "pgfleet_pools_client_maxwait_seconds";
inline constexpr std::string_view kPoolsServerPinned = "pgfleet_pools_server_pinned_connections";
// The LISTEN hub: clients listening through it and the servers it holds.
inline constexpr std::string_view kPoolsClientListening =
    "pgfleet_pools_client_listening_connections";
inline constexpr std::string_view kPoolsServerListening =
    "pgfleet_pools_server_listening_connections";
// {database, user, worker}: notifications the hub wrote to clients, and dropped from the queue
// of a client that did not read them.
inline constexpr std::string_view kNotificationsSent = "pgfleet_notifications_sent_total";
inline constexpr std::string_view kNotificationsDropped = "pgfleet_notifications_dropped_total";
// {database, user, worker, reason}: clients whose session state pinned a server, by what pinned it.
inline constexpr std::string_view kSessionPins = "pgfleet_session_pins_total";

// Stats {database, user, worker} (counters, like SHOW STATS_TOTALS).
inline constexpr std::string_view kStatsTransactions = "pgfleet_stats_transactions_total";
inline constexpr std::string_view kStatsQueries = "pgfleet_stats_queries_total";
inline constexpr std::string_view kStatsReceivedBytes = "pgfleet_stats_received_bytes_total";
inline constexpr std::string_view kStatsSentBytes = "pgfleet_stats_sent_bytes_total";
// Histograms (seconds): _bucket{le}, _sum (the total time) and _count.
inline constexpr std::string_view kStatsQueryDuration = "pgfleet_stats_query_duration_seconds";
inline constexpr std::string_view kStatsTransactionDuration =
    "pgfleet_stats_transaction_duration_seconds";
inline constexpr std::string_view kStatsWaitDuration = "pgfleet_stats_wait_duration_seconds";

// Per worker {worker}.
inline constexpr std::string_view kBudgetShare = "pgfleet_budget_share";  // {database, worker}
// {database, host, port, role, worker}: 1 when new servers may go to the host (up, and its role
// fits target_session_attrs); a database whose hosts are all 0 makes its clients wait.
inline constexpr std::string_view kDatabaseHostServes = "pgfleet_database_host_serves";
inline constexpr std::string_view kCancelReceived = "pgfleet_cancel_received_total";
inline constexpr std::string_view kCancelForwarded = "pgfleet_cancel_forwarded_total";
inline constexpr std::string_view kCancelDropped = "pgfleet_cancel_dropped_total";
// Queries cancelled while they still waited for a server: answered by pgfleet (57014).
inline constexpr std::string_view kCancelQueued = "pgfleet_cancel_queued_total";
// Queries whose client went away (or was closed) mid-query, cancelled in PostgreSQL by pgfleet.
inline constexpr std::string_view kCancelAbandoned = "pgfleet_cancel_abandoned_total";
// Further cancels for abandoned work that still ran 250 ms after the one before (PostgreSQL
// ignores a cancel that falls between statements: a pipeline's next query, a query not yet read).
inline constexpr std::string_view kCancelRepeated = "pgfleet_cancel_repeated_total";
inline constexpr std::string_view kClientConnections = "pgfleet_client_connections_total";
// {reason, worker}: reason is max_client_conn | max_concurrent_logins | hba | tls_required |
// tls_handshake | login_failed | protocol_error.
inline constexpr std::string_view kClientsRejected = "pgfleet_clients_rejected_total";
inline constexpr std::string_view kCancelRateLimited = "pgfleet_cancel_rate_limited_total";
// One pool per pod: idle servers a worker handed to a sibling whose clients waited.
inline constexpr std::string_view kServerHandoffs = "pgfleet_server_handoffs_total";
inline constexpr std::string_view kClientsBalanced = "pgfleet_clients_balanced_total";
inline constexpr std::string_view kErrors = "pgfleet_errors_total";  // {class, worker}
// {event, worker}: event is prepared | hit | reprepare | eviction.
inline constexpr std::string_view kPreparedStatements = "pgfleet_prepared_statements_total";

// Label names.
inline constexpr std::string_view kLabelDatabase = "database";
inline constexpr std::string_view kLabelUser = "user";
inline constexpr std::string_view kLabelWorker = "worker";
inline constexpr std::string_view kLabelClass = "class";
inline constexpr std::string_view kLabelEvent = "event";
inline constexpr std::string_view kLabelReason = "reason";
inline constexpr std::string_view kLabelVersion = "version";
inline constexpr std::string_view kLabelHost = "host";
inline constexpr std::string_view kLabelPort = "port";
inline constexpr std::string_view kLabelRole = "role";

}  // namespace pgfleet::metrics::names
