// Query cancellation through pooler-minted keys.
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using Clock = std::chrono::steady_clock;

class CancelTest : public IntegrationTest {};

TEST_F(CancelTest, CancelStopsLongQueryWithinASecond) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(30)"), 1);
  // Until PostgreSQL runs it: a cancel that arrives earlier has no query to stop.
  WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(30)'") != "0";
  });
  const auto start = Clock::now();
  PGcancel* cancel = PQgetCancel(c.get());
  char err[256];
  ASSERT_EQ(PQcancel(cancel, err, sizeof(err)), 1) << err;
  PQfreeCancel(cancel);
  ResultPtr r(PQgetResult(c.get()));
  const auto elapsed = Clock::now() - start;
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(SqlState(r), "57014");
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  // The connection and its server remain usable.
  EXPECT_EQ(Value(c, "SELECT 'after cancel'"), "after cancel");
}

TEST_F(CancelTest, LateCancelDoesNotHitTheNextQuery) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(Value(c, "SELECT 1"), "1");
  PGcancel* cancel = PQgetCancel(c.get());
  char err[256];
  // Nothing is running: the key's query is over, so the request must be dropped.
  ASSERT_EQ(PQcancel(cancel, err, sizeof(err)), 1) << err;
  PQfreeCancel(cancel);
  auto other = Connect(fleet.ConnString());
  EXPECT_EQ(Value(other, "SELECT pg_sleep(0.3)::text || 'done'"), "done");
  EXPECT_EQ(Value(c, "SELECT pg_sleep(0.3)::text || 'done'"), "done");
}

TEST_F(CancelTest, ForgedKeyCancelsNothing) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_EQ(PQsendQuery(c.get(), "SELECT pg_sleep(0.5)::text || 'finished'"), 1);
  // A cancel for PostgreSQL's real backend pid (what a client would see without pgfleet) or for a
  // made-up key must not reach the query.
  std::string cmd = absl::StrCat(
      "python3 -c \"import socket,struct; s=socket.create_connection(('127.0.0.1',", fleet.port(),
      ")); s.sendall(struct.pack('!iiii',16,80877102,12345,6789)); s.recv(1)\"");
  RunCommand(cmd);
  ResultPtr r(PQgetResult(c.get()));
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), "finished");
}

}  // namespace
}  // namespace pgfleet::testing
