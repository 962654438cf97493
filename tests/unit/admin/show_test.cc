#include "pooler/admin/show.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/protocol/byte_sink.h"

namespace pgfleet::admin {
namespace {

peering::v1::WorkerStats Worker(uint32_t slot, uint32_t active, uint32_t idle, uint64_t xacts) {
  peering::v1::WorkerStats w;
  w.set_slot(slot);
  w.set_peer_id(slot + 10);
  w.set_ready(true);
  w.set_clients(active + idle);
  auto* p = w.add_pools();
  p->set_database("app");
  p->set_user("u");
  p->set_pool_mode("transaction");
  p->set_client_active(active);
  p->set_client_idle(idle);
  p->set_client_waiting(1);
  p->set_server_active(active);
  p->set_server_idle(1);
  p->set_max_wait_us(2500000 + slot);
  p->set_transactions(xacts);
  p->set_queries(xacts * 2);
  p->mutable_period()->set_seconds(60);
  p->mutable_period()->set_transactions(xacts);
  p->mutable_period()->set_transaction_time_us(xacts * 10);
  auto* c = w.add_clients_info();
  c->set_id(7);
  c->set_user("u");
  c->set_database("app");
  c->set_state("active");
  c->set_link(9);
  return w;
}

// Rows as column -> value.
std::vector<std::map<std::string, std::string>> Table(void (*show)(const ShowInput&, ResultSet*),
                                                      const ShowInput& in,
                                                      std::vector<std::string>* columns = nullptr) {
  ResultSet rs;
  show(in, &rs);
  protocol::StringSink sink;
  rs.Write(sink, "SHOW");
  EXPECT_EQ(sink.bytes()[0], 'T');  // RowDescription first
  // Column names from the wire are not needed here: rebuild from the ResultSet via a second call.
  std::vector<std::map<std::string, std::string>> out;
  std::vector<std::string> names;
  const std::string& b = sink.bytes();
  // RowDescription: 'T' len int16 count, then per column: name\0 + 18 bytes.
  size_t pos = 7;
  const int n = (static_cast<uint8_t>(b[5]) << 8) | static_cast<uint8_t>(b[6]);
  for (int i = 0; i < n; ++i) {
    const size_t end = b.find('\0', pos);
    names.push_back(b.substr(pos, end - pos));
    pos = end + 1 + 18;
  }
  for (const auto& row : rs.rows()) {
    std::map<std::string, std::string> m;
    for (size_t i = 0; i < names.size(); ++i) m[names[i]] = row[i];
    out.push_back(std::move(m));
  }
  if (columns != nullptr) *columns = names;
  return out;
}

ShowInput TwoWorkers(const config::Config* fleet) {
  ShowInput in;
  in.workers = {Worker(0, 2, 3, 100), Worker(1, 1, 0, 50)};
  in.fleet = fleet;
  in.version = "9.9";
  in.own_peer_id = 10;
  return in;
}

TEST(ShowTest, PoolsSumOverWorkersWithPgBouncerColumns) {
  config::Config fleet;
  std::vector<std::string> columns;
  auto rows = Table(&ShowPools, TwoWorkers(&fleet), &columns);
  EXPECT_THAT(columns, ::testing::ElementsAre(
                           "database", "user", "cl_active", "cl_waiting", "cl_active_cancel_req",
                           "cl_waiting_cancel_req", "sv_active", "sv_active_cancel",
                           "sv_being_canceled", "sv_idle", "sv_used", "sv_tested", "sv_login",
                           "maxwait", "maxwait_us", "pool_mode", "sv_handed_over", "sv_adopted",
                           "sv_pinned", "cl_listening", "sv_listening"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["cl_active"], "6");  // linked + idle, as PgBouncer counts them
  EXPECT_EQ(rows[0]["cl_waiting"], "2");
  EXPECT_EQ(rows[0]["sv_active"], "3");
  EXPECT_EQ(rows[0]["sv_idle"], "2");
  EXPECT_EQ(rows[0]["maxwait"], "2");
  EXPECT_EQ(rows[0]["maxwait_us"], "500001");
}

TEST(ShowTest, StatsPerDatabaseWithAverages) {
  config::Config fleet;
  auto rows = Table(&ShowStats, TwoWorkers(&fleet));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["database"], "app");
  EXPECT_EQ(rows[0]["total_xact_count"], "150");
  EXPECT_EQ(rows[0]["total_query_count"], "300");
  EXPECT_EQ(rows[0]["avg_xact_count"], "2");  // 150 over a 60 s period
  EXPECT_EQ(rows[0]["avg_xact_time"], "10");
  auto totals = Table(&ShowStatsTotals, TwoWorkers(&fleet));
  EXPECT_EQ(totals[0]["xact_count"], "150");
}

TEST(ShowTest, ClientsCarryTheirWorkerAndPodWidePointers) {
  config::Config fleet;
  auto rows = Table(&ShowClients, TwoWorkers(&fleet));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["worker"], "0");
  EXPECT_EQ(rows[1]["worker"], "1");
  EXPECT_EQ(rows[0]["type"], "C");
  EXPECT_NE(rows[0]["ptr"], rows[1]["ptr"]);  // same connection id, different workers
  EXPECT_EQ(rows[0]["ptr"], "a0000000007");
  EXPECT_EQ(rows[0]["link"], "a0000000009");
}

TEST(ShowTest, WorkersListsUnreachableOnes) {
  config::Config fleet;
  ShowInput in = TwoWorkers(&fleet);
  in.failed.emplace_back(12, "connection refused");
  auto rows = Table(&ShowWorkers, in);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["xact_count"], "100");
  EXPECT_EQ(rows[1]["clients"], "1");
  EXPECT_EQ(rows[2]["state"], "unreachable: connection refused");
}

TEST(ShowTest, DatabasesFromTheFleetConfig) {
  config::Config fleet;
  config::DatabaseConfig db;
  db.name = "app";
  db.hosts = {"db.example"};
  db.max_db_connections = 50;
  fleet.databases["app"] = db;
  auto rows = Table(&ShowDatabases, TwoWorkers(&fleet));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["host"], "db.example");
  EXPECT_EQ(rows[0]["max_connections"], "50");
  EXPECT_EQ(rows[0]["pool_size"], "20");
}

}  // namespace
}  // namespace pgfleet::admin
