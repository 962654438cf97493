// SHOW STATS, STATS_TOTALS and STATS_AVERAGES: per database, summed over users and workers.
// Averages cover the last complete stats period (60 s, PgBouncer's stats_period): rates per
// second, durations per transaction/query/assignment, in microseconds.
#include <map>

#include "pooler/admin/show.h"
#include "pooler/base/strings.h"

namespace pgfleet::admin {
namespace {

using Type = ResultSet::Type;

struct DatabaseStats {
  uint64_t assignments = 0, transactions = 0, queries = 0, received = 0, sent = 0,
           transaction_us = 0, query_us = 0, wait_us = 0;
  peering::v1::PeriodStats period;
};

// Per database, or all under "".
std::map<std::string, DatabaseStats> Summed(const ShowInput& in, bool by_database) {
  std::map<std::string, DatabaseStats> out;
  const auto total = PodTotal(in);
  for (const auto& p : total.pools()) {
    auto& d = out[by_database ? p.database() : ""];
    d.assignments += p.server_assignments();
    d.transactions += p.transactions();
    d.queries += p.queries();
    d.received += p.received_bytes();
    d.sent += p.sent_bytes();
    d.transaction_us += p.transaction_time_us();
    d.query_us += p.query_time_us();
    d.wait_us += p.wait_time_us();
    const auto& q = p.period();
    auto& dp = d.period;
    dp.set_seconds(std::max(dp.seconds(), q.seconds()));
    dp.set_server_assignments(dp.server_assignments() + q.server_assignments());
    dp.set_transactions(dp.transactions() + q.transactions());
    dp.set_queries(dp.queries() + q.queries());
    dp.set_received_bytes(dp.received_bytes() + q.received_bytes());
    dp.set_sent_bytes(dp.sent_bytes() + q.sent_bytes());
    dp.set_transaction_time_us(dp.transaction_time_us() + q.transaction_time_us());
    dp.set_query_time_us(dp.query_time_us() + q.query_time_us());
    dp.set_wait_time_us(dp.wait_time_us() + q.wait_time_us());
  }
  return out;
}

std::map<std::string, DatabaseStats> ByDatabase(const ShowInput& in) {
  return Summed(in, /*by_database=*/true);
}

std::string Div(uint64_t a, uint64_t b) { return std::to_string(b == 0 ? 0 : a / b); }

const char* const kNames[] = {"server_assignment_count",
                              "xact_count",
                              "query_count",
                              "bytes_received",
                              "bytes_sent",
                              "xact_time",
                              "query_time",
                              "wait_time",
                              "client_parse_count",
                              "server_parse_count",
                              "bind_count"};

std::vector<std::string> Totals(const DatabaseStats& d) {
  return {std::to_string(d.assignments),
          std::to_string(d.transactions),
          std::to_string(d.queries),
          std::to_string(d.received),
          std::to_string(d.sent),
          std::to_string(d.transaction_us),
          std::to_string(d.query_us),
          std::to_string(d.wait_us),
          "0",
          "0",
          "0"};
}

std::vector<std::string> Averages(const DatabaseStats& d) {
  const auto& p = d.period;
  const uint64_t s = p.seconds();
  return {Div(p.server_assignments(), s),
          Div(p.transactions(), s),
          Div(p.queries(), s),
          Div(p.received_bytes(), s),
          Div(p.sent_bytes(), s),
          Div(p.transaction_time_us(), p.transactions()),
          Div(p.query_time_us(), p.queries()),
          Div(p.wait_time_us(), p.server_assignments()),
          "0",
          "0",
          "0"};
}

}  // namespace

void ShowTotals(const ShowInput& in, ResultSet* out) {
  // PgBouncer's SHOW TOTALS: SHOW STATS summed over every database, one (name, value) row each.
  const DatabaseStats all = Summed(in, /*by_database=*/false)[""];
  out->AddColumn("name").AddColumn("value", Type::kInt);
  const std::vector<std::string> totals = Totals(all);
  const std::vector<std::string> averages = Averages(all);
  for (size_t i = 0; i < std::size(kNames); ++i) {
    out->AddRow({base::StrCat("total_", kNames[i]), totals[i]});
  }
  for (size_t i = 0; i < std::size(kNames); ++i) {
    out->AddRow({base::StrCat("avg_", kNames[i]), averages[i]});
  }
}

void ShowStatsTotals(const ShowInput& in, ResultSet* out) {
  out->AddColumn("database");
  for (const char* n : kNames) out->AddColumn(n, Type::kInt);
  for (const auto& [db, d] : ByDatabase(in)) {
    std::vector<std::string> row = {db};
    for (auto& v : Totals(d)) row.push_back(std::move(v));
    out->AddRow(std::move(row));
  }
}

void ShowStatsAverages(const ShowInput& in, ResultSet* out) {
  out->AddColumn("database");
  for (const char* n : kNames) out->AddColumn(n, Type::kInt);
  for (const auto& [db, d] : ByDatabase(in)) {
    std::vector<std::string> row = {db};
    for (auto& v : Averages(d)) row.push_back(std::move(v));
    out->AddRow(std::move(row));
  }
}

void ShowStats(const ShowInput& in, ResultSet* out) {
  // PgBouncer 1.23's column names (bytes are total_received/avg_recv there).
  static const char* const kTotal[] = {"total_server_assignment_count",
                                       "total_xact_count",
                                       "total_query_count",
                                       "total_received",
                                       "total_sent",
                                       "total_xact_time",
                                       "total_query_time",
                                       "total_wait_time",
                                       "total_client_parse_count",
                                       "total_server_parse_count",
                                       "total_bind_count"};
  static const char* const kAvg[] = {"avg_server_assignment_count",
                                     "avg_xact_count",
                                     "avg_query_count",
                                     "avg_recv",
                                     "avg_sent",
                                     "avg_xact_time",
                                     "avg_query_time",
                                     "avg_wait_time",
                                     "avg_client_parse_count",
                                     "avg_server_parse_count",
                                     "avg_bind_count"};
  out->AddColumn("database");
  for (const char* n : kTotal) out->AddColumn(n, Type::kInt);
  for (const char* n : kAvg) out->AddColumn(n, Type::kInt);
  for (const auto& [db, d] : ByDatabase(in)) {
    std::vector<std::string> row = {db};
    for (auto& v : Totals(d)) row.push_back(std::move(v));
    for (auto& v : Averages(d)) row.push_back(std::move(v));
    out->AddRow(std::move(row));
  }
}

}  // namespace pgfleet::admin
