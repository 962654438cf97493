// libpq pipeline mode through transaction pooling: many messages before one Sync, many Syncs.
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

class PipelineTest : public IntegrationTest {
 protected:
  // Reads one result per query until the pipeline sync; returns how many commands succeeded.
  int DrainUntilSync(PGconn* c, int* syncs_seen, int expected_syncs) {
    int ok = 0;
    while (*syncs_seen < expected_syncs) {
      PGresult* r = PQgetResult(c);
      if (r == nullptr) continue;  // end of one query's results
      auto status = PQresultStatus(r);
      if (status == PGRES_PIPELINE_SYNC) ++*syncs_seen;
      if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) ++ok;
      PQclear(r);
    }
    return ok;
  }
};

TEST_F(PipelineTest, TenThousandInsertsInOneSync) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_TRUE(ResultOk(Exec(c, "DROP TABLE IF EXISTS pipe1; CREATE TABLE pipe1 (id int)")));
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  constexpr int kInserts = 10000;
  for (int i = 0; i < kInserts; ++i) {
    std::string v = std::to_string(i);
    const char* values[] = {v.c_str()};
    ASSERT_EQ(PQsendQueryParams(c.get(), "INSERT INTO pipe1 VALUES ($1::int)", 1, nullptr, values,
                                nullptr, nullptr, 0),
              1);
  }
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  int syncs = 0;
  EXPECT_EQ(DrainUntilSync(c.get(), &syncs, 1), kInserts);
  ASSERT_EQ(PQexitPipelineMode(c.get()), 1);
  EXPECT_EQ(Value(c, "SELECT count(*) FROM pipe1"), std::to_string(kInserts));
}

TEST_F(PipelineTest, ThousandSyncsInFlight) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  auto other = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c) && Ok(other));
  ASSERT_TRUE(ResultOk(Exec(c, "DROP TABLE IF EXISTS pipe2; CREATE TABLE pipe2 (id int)")));
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  constexpr int kSyncs = 1000;
  for (int i = 0; i < kSyncs; ++i) {
    std::string v = std::to_string(i);
    const char* values[] = {v.c_str()};
    ASSERT_EQ(PQsendQueryParams(c.get(), "INSERT INTO pipe2 VALUES ($1::int)", 1, nullptr, values,
                                nullptr, nullptr, 0),
              1);
    ASSERT_EQ(PQpipelineSync(c.get()), 1);
  }
  int syncs = 0;
  EXPECT_EQ(DrainUntilSync(c.get(), &syncs, kSyncs), kSyncs);
  EXPECT_EQ(syncs, kSyncs);
  ASSERT_EQ(PQexitPipelineMode(c.get()), 1);
  EXPECT_EQ(Value(other, "SELECT count(*) FROM pipe2"), std::to_string(kSyncs));
}

TEST_F(PipelineTest, ErrorInsidePipelineSkipsToSyncAndServerStaysUsable) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "SELECT 1/0", 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "SELECT 2", 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "SELECT 3", 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  int syncs = 0;
  EXPECT_EQ(DrainUntilSync(c.get(), &syncs, 2), 1);  // only SELECT 3
  ASSERT_EQ(PQexitPipelineMode(c.get()), 1);
  auto d = Connect(fleet.ConnString());
  EXPECT_EQ(Value(d, "SELECT 'ok'"), "ok");
}

}  // namespace
}  // namespace pgfleet::testing
