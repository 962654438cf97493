// Host lists, target_session_attrs and failover (issue 16): a primary and a streaming standby on
// loopback (pg_basebackup -R), entries that want the primary, a standby, or a standby first, and
// a switchover under load: the old primary stops, the standby is promoted, the old primary comes
// back as a standby of the new one.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

class FailoverTest : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    primary_ = std::make_unique<PgServer>(PgServerOptions{});
    primary_->Start();
    primary_->Exec("CREATE TABLE failover_log (id bigserial PRIMARY KEY, port int NOT NULL)");
    standby_ = PgServer::StandbyOf(*primary_);
  }

  // Each entry lists both servers, the primary first: what it gets is its target_session_attrs'.
  std::string Config(const std::string& query_wait_timeout = "60s") const {
    const std::string hosts = absl::StrCat("host: '127.0.0.1,127.0.0.1', port: '", primary_->port(),
                                           ",", standby_->port(), "', dbname: postgres");
    return absl::StrCat("workers: 1\n", "databases:\n",                                   //
                        "  rw: {", hosts, ", target_session_attrs: read-write}\n",        //
                        "  ro: {", hosts, ", target_session_attrs: standby}\n",           //
                        "  pref: {", hosts, ", target_session_attrs: prefer-standby}\n",  //
                        "  any: {", hosts, "}\n",                                         //
                        "pool:\n  pool_mode: transaction\n  default_pool_size: 4\n",
                        "  query_wait_timeout: ", query_wait_timeout, "\n",
                        "admin:\n  users: [postgres]\n");
  }

  // The port of the PostgreSQL that answers `dbname` through pgfleet, or "" on failure.
  static std::string ServerPort(const PgfleetProcess& fleet, const std::string& dbname) {
    auto c = Connect(fleet.ConnString("postgres", dbname));
    if (!Ok(c)) return "";
    return Value(c, "SELECT inet_server_port()::text");
  }

  std::unique_ptr<PgServer> primary_;
  std::unique_ptr<PgServer> standby_;
};

TEST_F(FailoverTest, EachEntryGetsTheHostItsTargetSessionAttrsAsk) {
  PgfleetProcess fleet(Config());
  const std::string p = std::to_string(primary_->port());
  const std::string s = std::to_string(standby_->port());
  EXPECT_EQ(ServerPort(fleet, "rw"), p);
  EXPECT_EQ(ServerPort(fleet, "ro"), s) << "the primary is listed first, but is no standby\n"
                                        << fleet.Log();
  EXPECT_EQ(ServerPort(fleet, "pref"), s);
  EXPECT_EQ(ServerPort(fleet, "any"), p);

  // What pgfleet tells clients is the host's: libpq's own target_session_attrs agrees with it.
  auto rw = Connect(fleet.ConnString("postgres", "rw", "target_session_attrs=read-write"));
  EXPECT_TRUE(Ok(rw)) << ErrorOf(rw);
  auto ro = Connect(fleet.ConnString("postgres", "ro", "target_session_attrs=read-write"));
  EXPECT_FALSE(Ok(ro)) << "a standby entry must not look writable";
  auto ro_standby = Connect(fleet.ConnString("postgres", "ro", "target_session_attrs=standby"));
  EXPECT_TRUE(Ok(ro_standby)) << ErrorOf(ro_standby);

  // SHOW DATABASES and SHOW SERVERS tell each host's role.
  auto admin = Connect(fleet.ConnString("postgres", "pgfleet"));
  ASSERT_TRUE(Ok(admin)) << ErrorOf(admin);
  std::string rw_hosts;
  for (const Row& row : RowsOf(Exec(admin, "SHOW DATABASES"))) {
    if (row.at("name") == "rw") {
      EXPECT_EQ(row.at("target_session_attrs"), "read-write");
      rw_hosts = row.at("hosts");
    }
  }
  EXPECT_THAT(rw_hosts, HasSubstr("127.0.0.1:" + p + " primary"));
  bool standby_server = false;
  for (const Row& row : RowsOf(Exec(admin, "SHOW SERVERS"))) {
    if (row.at("database") == "ro") {
      EXPECT_EQ(row.at("port"), s);
      EXPECT_EQ(row.at("host_role"), "standby");
      standby_server = true;
    }
  }
  EXPECT_TRUE(standby_server);
  // The metric says which host serves each entry (published about once a second).
  const std::string serving = absl::StrCat("database=\"rw\",host=\"127.0.0.1\",port=\"", p,
                                           "\",role=\"primary\",worker=\"0\"} 1");
  std::string metrics;
  EXPECT_TRUE(WaitFor([&] {
    return HttpGet(fleet.metrics_port(), "/metrics", &metrics) == 200 &&
           metrics.find(serving) != std::string::npos;
  })) << serving
      << "\n"
      << metrics;
}

// The switchover under load. Writers insert through `rw` with reconnecting clients, as an
// application does; readers read through `ro`. Only transactions in flight when the primary
// stops may fail; writes resume on the promoted standby within 5 s of its promotion; `ro` keeps
// reading from the standby until it is promoted, waits while no standby exists, and reads from
// the old primary once it is back as a standby.
TEST_F(FailoverTest, SwitchoverUnderLoadCostsOnlyInFlightTransactions) {
  PgfleetProcess fleet(Config());
  const std::string p = std::to_string(primary_->port());
  const std::string s = std::to_string(standby_->port());
  constexpr int kWriters = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::atomic<int> failures{0};
  std::atomic<int> writes_on_new_primary{0};
  std::vector<std::thread> load;
  for (int i = 0; i < kWriters; ++i) {
    load.emplace_back([&] {
      ConnPtr c;
      for (int n = 0; n < 200000 && !stop; ++n) {
        if (!Ok(c)) c = Connect(fleet.ConnString("postgres", "rw"));
        if (!Ok(c)) {
          ++failures;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        ResultPtr r = Exec(c,
                           "INSERT INTO failover_log (port) VALUES (inet_server_port()) "
                           "RETURNING port::text");
        if (!ResultOk(r)) {
          ++failures;
          c.reset();  // a client whose server died is closed by pgfleet: reconnect
          continue;
        }
        ++writes;
        if (PQgetvalue(r.get(), 0, 0) == s) ++writes_on_new_primary;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ASSERT_TRUE(WaitFor([&] { return writes.load() > 50; })) << fleet.Log();
  ASSERT_EQ(ServerPort(fleet, "ro"), s);

  // The old primary goes away first (a controlled switchover stops writes before promoting).
  primary_->Stop();
  // Meanwhile `ro` still reads from the standby.
  EXPECT_EQ(ServerPort(fleet, "ro"), s);
  const int failures_before_promotion = failures.load();
  standby_->Promote();
  const auto promoted = Clock::now();
  ASSERT_TRUE(
      WaitFor([&] { return writes_on_new_primary.load() > 0; }, std::chrono::milliseconds(10000)))
      << fleet.Log();
  const auto recovered = Clock::now() - promoted;
  std::printf("switchover: writes resumed %lld ms after the promotion; %d writes failed\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(recovered).count()),
              failures.load());
  EXPECT_LT(recovered, std::chrono::seconds(5))
      << "writes resumed "
      << std::chrono::duration_cast<std::chrono::milliseconds>(recovered).count()
      << " ms after the promotion";
  const int at_recovery = writes_on_new_primary.load();
  ASSERT_TRUE(WaitFor([&] { return writes_on_new_primary.load() > at_recovery + 50; }));
  stop = true;
  for (auto& t : load) t.join();
  // Each writer had at most one transaction in flight when the primary stopped; nothing failed
  // after that (clients queued until the promotion).
  EXPECT_LE(failures.load(), kWriters) << fleet.Log();
  EXPECT_EQ(failures.load(), failures_before_promotion) << "a write failed after the promotion";

  // libpq's target_session_attrs=read-write accepts the rw entry after the promotion.
  auto check = Connect(fleet.ConnString("postgres", "rw", "target_session_attrs=read-write"));
  EXPECT_TRUE(Ok(check)) << ErrorOf(check);

  // No standby now: `ro` waits (it does not fail) and reads from the old primary once that is
  // back as a standby of the new one.
  std::atomic<bool> read_done{false};
  std::string read_port;
  std::thread reader([&] {
    read_port = ServerPort(fleet, "ro");
    read_done = true;
  });
  primary_->RebuildAsStandbyOf(*standby_);
  EXPECT_TRUE(WaitFor([&] { return read_done.load(); }, std::chrono::milliseconds(30000)));
  reader.join();
  EXPECT_EQ(read_port, p) << fleet.Log();
  // `pref` prefers that standby too once its servers are new; `rw` stays on the new primary.
  EXPECT_EQ(ServerPort(fleet, "rw"), s);
  EXPECT_EQ(primary_->QueryValue("SELECT count(*) > 0 FROM failover_log WHERE port = " + s), "t")
      << "the rebuilt standby replicates the new primary";
}

// A standby promoted under a standby-only entry: its servers leave the pool as soon as the
// promotion is reported (in_hot_standby), and its clients wait for a standby instead of writing to
// a primary.
TEST_F(FailoverTest, APromotedStandbyLeavesAStandbyEntry) {
  PgfleetProcess fleet(Config("3s"));
  auto ro = Connect(fleet.ConnString("postgres", "ro"));
  ASSERT_TRUE(Ok(ro)) << ErrorOf(ro);
  ASSERT_EQ(Value(ro, "SELECT pg_is_in_recovery()::text"), "true");
  standby_->Promote();
  // PostgreSQL reports in_hot_standby with a session's next ReadyForQuery: the query that brings
  // the news still runs there (a read, as this entry's are).
  Exec(ro, "SELECT 1");
  // Then the server leaves, and with the primary the only host up there is no standby: the query
  // waits and times out rather than running on a primary.
  EXPECT_TRUE(WaitFor([&] {
    return fleet.Log().find("server_host_role_changed") != std::string::npos;
  })) << fleet.Log();
  ResultPtr r = Exec(ro, "SELECT pg_is_in_recovery()::text");
  EXPECT_FALSE(ResultOk(r));
  EXPECT_THAT(ErrorOf(ro), HasSubstr("query_wait_timeout")) << fleet.Log();
}

// A standby behind an idle pool is promoted. PostgreSQL reports in_hot_standby only with a
// session's next ReadyForQuery, and nothing runs there; the janitor asks an idle server, so a
// client that wants a read-write session gets in within seconds (libpq judges the welcome's
// in_hot_standby; before, it said "session is read-only" until some client ran a query).
TEST_F(FailoverTest, APromotionBehindAnIdlePoolReachesTheWelcomeWithoutTraffic) {
  PgfleetProcess fleet(absl::StrCat(
      "workers: 1\ndatabases:\n  solo: {host: 127.0.0.1, port: ", standby_->port(),
      ", dbname: postgres}\n", "pool:\n  pool_mode: transaction\n  default_pool_size: 2\n"));
  {
    auto c = Connect(fleet.ConnString("postgres", "solo"));
    ASSERT_TRUE(Ok(c)) << ErrorOf(c);
    ASSERT_EQ(Value(c, "SELECT pg_is_in_recovery()::text"), "true");
  }
  const std::string read_write =
      fleet.ConnString("postgres", "solo") + " target_session_attrs=read-write";
  {
    auto refused = Connect(read_write);
    ASSERT_FALSE(Ok(refused)) << "a standby's welcome must not pass for read-write";
  }
  standby_->Promote();
  std::string last_error;
  const bool got_in = WaitFor(
      [&] {
        auto c = Connect(read_write);
        if (!Ok(c)) {
          last_error = ErrorOf(c);
          return false;
        }
        return Value(c, "SELECT pg_is_in_recovery()::text") == "false";
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(got_in) << last_error << fleet.Log();
}

}  // namespace
}  // namespace pgfleet::testing
