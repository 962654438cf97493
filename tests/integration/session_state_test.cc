// Session state under transaction pooling against a real PostgreSQL (docs/architecture.md,
// "Session state in transaction pooling"): settings follow their client to every server it gets
// and never reach another client; temporary tables, SQL prepared statements, advisory locks,
// cursors WITH HOLD and LISTEN pin the client's server until released; max_pinned_servers
// refuses a pin with an ERROR; session_state: refuse and pass.
//
// A neighbour client holding a transaction open makes servers change hands deterministically:
// with a pool of 2, the client under test gets the other server for each of its transactions.
#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

class SessionStateTest : public IntegrationTest {
 protected:
  static std::string Config(const std::string& pool_extra = "", int pool_size = 2,
                            int workers = 1) {
    return absl::StrCat("workers: ", workers,
                        "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                        "}\npool:\n  pool_mode: transaction\n  default_pool_size: ", pool_size,
                        "\n", pool_extra, "admin:\n  users: [admin]\n");
  }
  static PgServer& pg() { return PgServer::Shared(); }

  static ConnPtr Client(const PgfleetProcess& fleet) {
    ConnPtr c = Connect(fleet.ConnString());
    EXPECT_TRUE(Ok(c)) << ErrorOf(c);
    return c;
  }
  static std::string Pid(const ConnPtr& c) { return Value(c, "SELECT pg_backend_pid()"); }
  static void Run(const ConnPtr& c, const std::string& sql) {
    ResultPtr r = Exec(c, sql);
    ASSERT_TRUE(ResultOk(r)) << sql << ": " << ErrorOf(c);
  }

  // SHOW POOLS' sv_pinned and SHOW CLIENTS' pinned column, through the admin console.
  static int PinnedServers(const PgfleetProcess& fleet) {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    int pinned = 0;
    for (const Row& row : RowsOf(Exec(admin, "SHOW POOLS"))) {
      if (row.at("database") == "postgres") pinned += std::stoi(row.at("sv_pinned"));
    }
    return pinned;
  }
  static std::multiset<std::string> PinReasons(const PgfleetProcess& fleet) {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    std::multiset<std::string> reasons;
    for (const Row& row : RowsOf(Exec(admin, "SHOW CLIENTS"))) {
      if (!row.at("pinned").empty()) reasons.insert(row.at("pinned"));
    }
    return reasons;
  }
  // A SHOW POOLS column summed over the pod (the postgres pool).
  static int PoolColumn(const PgfleetProcess& fleet, const std::string& column) {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    int sum = 0;
    for (const Row& row : RowsOf(Exec(admin, "SHOW POOLS"))) {
      if (row.at("database") == "postgres") sum += std::stoi(row.at(column));
    }
    return sum;
  }
  // The worker (SHOW CLIENTS' slot) that serves `c`, or "".
  static std::string SlotOf(const ConnPtr& admin, const ConnPtr& c) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(PQsocket(c.get()), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
    const std::string port = std::to_string(ntohs(addr.sin_port));
    for (const Row& row : RowsOf(Exec(admin, "SHOW CLIENTS"))) {
      if (row.at("port") == port && row.at("addr") == "127.0.0.1") return row.at("worker");
    }
    return "";
  }
  // The next notification `c` receives within `timeout` (a bounded wait on its socket), or null.
  struct NotifyDeleter {
    void operator()(PGnotify* n) const { PQfreemem(n); }
  };
  using NotifyPtr = std::unique_ptr<PGnotify, NotifyDeleter>;
  static NotifyPtr NextNotify(const ConnPtr& c, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (PQconsumeInput(c.get()) != 1) return nullptr;
      if (PGnotify* n = PQnotifies(c.get())) return NotifyPtr(n);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return nullptr;
      pollfd pfd{PQsocket(c.get()), POLLIN, 0};
      (void)poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
    }
  }
  static bool WaitForPinned(const PgfleetProcess& fleet, int n) {
    return WaitFor([&] { return PinnedServers(fleet) == n; }, std::chrono::seconds(5));
  }
};

TEST_F(SessionStateTest, SettingsFollowTheirClientToEveryServerAndNeverReachAnother) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto neighbour = Client(fleet);
  Run(a, "SET statement_timeout = '4321ms'");
  Run(a, "SET search_path = app_schema, public");
  Run(a, "SELECT set_config('app.tenant', 'acme', false)");
  // Extended protocol (psycopg, pgx): the same SET through Parse/Bind/Execute.
  ResultPtr extended(PQexecParams(a.get(), "SET lock_timeout = '1500ms'", 0, nullptr, nullptr,
                                  nullptr, nullptr, 0));
  ASSERT_TRUE(ResultOk(extended)) << ErrorOf(a);
  // Transactional: a rolled-back SET is gone, a committed one stays.
  Run(a, "BEGIN");
  Run(a, "SET work_mem = '3MB'");
  Run(a, "ROLLBACK");
  Run(a, "BEGIN; SET idle_in_transaction_session_timeout = '77s'; COMMIT");
  Run(a, "BEGIN");
  Run(a, "SET LOCAL maintenance_work_mem = '9MB'");  // ends with its transaction
  Run(a, "COMMIT");
  // A ROLLBACK in the same Query undoes the SETs before it, not those after it.
  Run(a, "BEGIN; SET cpu_tuple_cost = 0.5; ROLLBACK; SET cpu_index_tuple_cost = 0.25");
  // The same in one extended-protocol batch (a pipeline of four statements, one Sync).
  ASSERT_EQ(PQenterPipelineMode(a.get()), 1);
  for (const char* sql :
       {"BEGIN", "SET seq_page_cost = 3", "ROLLBACK", "SET random_page_cost = 5"}) {
    ASSERT_EQ(PQsendQueryParams(a.get(), sql, 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
  }
  ASSERT_EQ(PQpipelineSync(a.get()), 1);
  for (int i = 0; i < 4; ++i) {
    ResultPtr r(PQgetResult(a.get()));
    ASSERT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << ErrorOf(a);
    ResultPtr end(PQgetResult(a.get()));
    ASSERT_EQ(end, nullptr);
  }
  ResultPtr sync(PQgetResult(a.get()));
  ASSERT_EQ(PQresultStatus(sync.get()), PGRES_PIPELINE_SYNC);
  ASSERT_EQ(PQexitPipelineMode(a.get()), 1) << ErrorOf(a);

  std::set<std::string> a_servers;
  for (int round = 0; round < 4; ++round) {
    // The neighbour holds one server inside a transaction; `a` gets the other one. Who comes
    // first alternates, so that `a` gets the server the neighbour used last every other round.
    if (round % 2 == 1) Run(a, "BEGIN");
    Run(neighbour, "BEGIN");
    const std::string neighbour_pid = Pid(neighbour);
    EXPECT_EQ(Value(neighbour, "SHOW statement_timeout"), "0") << "round " << round;
    EXPECT_EQ(Value(neighbour, "SHOW search_path"), "\"$user\", public");
    EXPECT_EQ(Value(neighbour, "SELECT coalesce(current_setting('app.tenant', true), '')"), "");
    EXPECT_EQ(Value(neighbour, "SHOW lock_timeout"), "0");
    EXPECT_EQ(Value(neighbour, "SHOW idle_in_transaction_session_timeout"), "0");

    const std::string a_pid = Pid(a);
    EXPECT_NE(a_pid, neighbour_pid);
    a_servers.insert(a_pid);
    EXPECT_EQ(Value(a, "SHOW statement_timeout"), "4321ms") << "round " << round;
    EXPECT_EQ(Value(a, "SHOW search_path"), "app_schema, public");
    EXPECT_EQ(Value(a, "SELECT current_setting('app.tenant')"), "acme");
    EXPECT_EQ(Value(a, "SHOW lock_timeout"), "1500ms");
    EXPECT_EQ(Value(a, "SHOW work_mem"), "4MB");
    EXPECT_EQ(Value(a, "SHOW idle_in_transaction_session_timeout"), "77s");
    EXPECT_EQ(Value(a, "SHOW maintenance_work_mem"), "64MB");
    EXPECT_EQ(Value(a, "SHOW cpu_tuple_cost"), "0.01");
    EXPECT_EQ(Value(a, "SHOW cpu_index_tuple_cost"), "0.25");
    EXPECT_EQ(Value(a, "SHOW seq_page_cost"), "1");
    EXPECT_EQ(Value(a, "SHOW random_page_cost"), "5");
    if (round % 2 == 1) Run(a, "COMMIT");
    Run(neighbour, "COMMIT");
  }
  EXPECT_EQ(a_servers.size(), 2u) << "the client's transactions must have used both servers";

  // RESET and DISCARD ALL end what they name, on whichever server comes next.
  Run(a, "RESET statement_timeout");
  Run(neighbour, "BEGIN");
  (void)Pid(neighbour);
  EXPECT_EQ(Value(a, "SHOW statement_timeout"), "0");
  EXPECT_EQ(Value(a, "SHOW search_path"), "app_schema, public");
  Run(neighbour, "COMMIT");
  Run(a, "DISCARD ALL");
  Run(neighbour, "BEGIN");
  (void)Pid(neighbour);
  EXPECT_EQ(Value(a, "SHOW search_path"), "\"$user\", public");
  EXPECT_EQ(Value(a, "SHOW lock_timeout"), "0");
  Run(neighbour, "COMMIT");
}

TEST_F(SessionStateTest, ATemporaryTablePinsItsServerUntilDropped) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto neighbour = Client(fleet);
  Run(a, "CREATE TEMP TABLE scratch (n int)");
  Run(a, "INSERT INTO scratch VALUES (1)");
  const std::string pinned_pid = Pid(a);
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  EXPECT_EQ(PinReasons(fleet), std::multiset<std::string>{"temp_table"});
  for (int round = 0; round < 3; ++round) {
    Run(neighbour, "BEGIN");
    EXPECT_NE(Pid(neighbour), pinned_pid) << "a pinned server serves nobody else";
    EXPECT_EQ(Value(neighbour, "SELECT to_regclass('pg_temp.scratch') IS NULL"), "t");
    Run(a, "INSERT INTO scratch VALUES (2)");
    EXPECT_EQ(Pid(a), pinned_pid);
    Run(neighbour, "COMMIT");
  }
  EXPECT_EQ(Value(a, "SELECT count(*) FROM scratch"), "4");
  // ON COMMIT DROP tables end with their transaction: no pin.
  Run(a, "BEGIN; CREATE TEMP TABLE t2 (n int) ON COMMIT DROP; COMMIT");
  Run(a, "DROP TABLE scratch");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
  // Released: two neighbours in transactions use both servers, the formerly pinned one too.
  auto second = Client(fleet);
  Run(neighbour, "BEGIN");
  Run(second, "BEGIN");
  const std::set<std::string> pids = {Pid(neighbour), Pid(second)};
  EXPECT_TRUE(pids.contains(pinned_pid));
  Run(neighbour, "COMMIT");
  Run(second, "COMMIT");
  // The metrics endpoint publishes once a second or so: poll.
  EXPECT_TRUE(WaitFor([&] { return MetricSum(fleet, "pgfleet_session_pins_total") > 0; },
                      std::chrono::seconds(10)));
}

TEST_F(SessionStateTest, PreparedStatementsLocksAndHoldCursorsPinUntilReleased) {
  PgfleetProcess fleet(Config("  max_pinned_servers: 2\n", 3));
  auto a = Client(fleet);
  auto neighbour = Client(fleet);

  Run(a, "PREPARE answer (int) AS SELECT 40 + $1");
  for (int round = 0; round < 3; ++round) {
    Run(neighbour, "BEGIN");
    EXPECT_EQ(Value(a, "EXECUTE answer(2)"), "42");
    ResultPtr r = Exec(neighbour, "EXECUTE answer(2)");
    EXPECT_EQ(SqlState(r), "26000") << "another client must not see the statement";
    Run(neighbour, "ROLLBACK");
  }
  Run(a, "DEALLOCATE answer");
  ASSERT_TRUE(WaitForPinned(fleet, 0));

  Run(a, "SELECT pg_advisory_lock(4242)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  EXPECT_EQ(Value(neighbour, "SELECT pg_try_advisory_lock(4242)"), "f");
  Run(a, "SELECT pg_advisory_unlock(4242)");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
  EXPECT_EQ(Value(neighbour, "SELECT pg_try_advisory_lock(4242)"), "t");
  EXPECT_EQ(Value(neighbour, "SELECT pg_advisory_unlock(4242)"), "t");

  Run(a, "BEGIN");
  Run(a, "DECLARE rows CURSOR WITH HOLD FOR SELECT generate_series(1, 3)");
  Run(a, "COMMIT");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  Run(neighbour, "BEGIN");
  (void)Pid(neighbour);
  EXPECT_EQ(Value(a, "FETCH 1 FROM rows"), "1");
  EXPECT_EQ(Value(a, "FETCH 1 FROM rows"), "2");
  Run(neighbour, "COMMIT");
  Run(a, "CLOSE rows");
  ASSERT_TRUE(WaitForPinned(fleet, 0));

  // A client that leaves holding a lock: its server is reset (DISCARD ALL) before reuse, so the
  // lock is free for the next client.
  Run(a, "SELECT pg_advisory_lock(77)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  a.reset();
  ASSERT_TRUE(WaitForPinned(fleet, 0));
  EXPECT_TRUE(WaitFor([&] { return Value(neighbour, "SELECT pg_try_advisory_lock(77)") == "t"; },
                      std::chrono::seconds(5)));
  Run(neighbour, "SELECT pg_advisory_unlock_all()");
}

TEST_F(SessionStateTest, ThePinnedServerLimitRefusesWithAnErrorAndTheClientGoesOn) {
  PgfleetProcess fleet(Config("  max_pinned_servers: 1\n", 3));
  auto a = Client(fleet);
  auto b = Client(fleet);
  Run(a, "CREATE TEMP TABLE mine (n int)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));

  ResultPtr refused = Exec(b, "CREATE TEMP TABLE theirs (n int)");
  EXPECT_EQ(SqlState(refused), "53400");
  EXPECT_THAT(ErrorOf(b), HasSubstr("max_pinned_servers = 1"));
  EXPECT_EQ(Value(b, "SELECT to_regclass('pg_temp.theirs') IS NULL"), "t");
  EXPECT_EQ(Value(b, "SELECT 1"), "1") << "the client goes on";
  // The extended protocol's unnamed statement (psycopg, pgx), with a parameter.
  const char* key = "9";
  ResultPtr extended(PQexecParams(b.get(), "SELECT pg_advisory_lock($1::bigint)", 1, nullptr, &key,
                                  nullptr, nullptr, 0));
  EXPECT_EQ(SqlState(extended), "53400") << ErrorOf(b);
  EXPECT_EQ(Value(b, "SELECT 2"), "2");
  // Inside a transaction the refusal fails the transaction, as any error would.
  Run(b, "BEGIN");
  refused = Exec(b, "SELECT pg_advisory_lock(9)");
  EXPECT_EQ(SqlState(refused), "53400");
  EXPECT_EQ(SqlState(Exec(b, "SELECT 1")), "25P02");
  Run(b, "ROLLBACK");
  EXPECT_EQ(Value(b, "SELECT 1"), "1");
  // A client already pinned may add more state to its own server.
  Run(a, "SELECT pg_advisory_lock(10)");
  Run(a, "SELECT pg_advisory_unlock_all()");
  Run(a, "DROP TABLE mine");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
  Run(b, "CREATE TEMP TABLE theirs (n int)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
}

// pg_try_advisory_lock answers as PostgreSQL does whatever the pin limit: false for a lock another
// client holds (nothing pins), true for a free one (its pin counts beyond the limit).
TEST_F(SessionStateTest, TryAdvisoryLockIsNeverRefusedByThePinLimit) {
  PgfleetProcess fleet(Config("  max_pinned_servers: 1\n", 3));
  auto a = Client(fleet);
  auto b = Client(fleet);
  ASSERT_EQ(Value(a, "SELECT pg_advisory_lock(4343)::text"), "");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  ResultPtr held = Exec(b, "SELECT pg_try_advisory_lock(4343)");
  ASSERT_TRUE(ResultOk(held)) << ErrorOf(b);
  EXPECT_EQ(std::string(PQgetvalue(held.get(), 0, 0)), "f");
  const char* key = "4343";
  ResultPtr extended(PQexecParams(b.get(), "SELECT pg_try_advisory_lock($1::bigint)", 1, nullptr,
                                  &key, nullptr, nullptr, 0));
  ASSERT_TRUE(ResultOk(extended)) << ErrorOf(b);
  EXPECT_EQ(std::string(PQgetvalue(extended.get(), 0, 0)), "f");
  EXPECT_EQ(PinnedServers(fleet), 1);
  // A free lock is taken, and its server stays with b.
  EXPECT_EQ(Value(b, "SELECT pg_try_advisory_lock(4344)"), "t");
  ASSERT_TRUE(WaitForPinned(fleet, 2));
  EXPECT_EQ(Value(b,
                  "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                  "objid = 4344 AND pid = pg_backend_pid()"),
            "1");
  Run(b, "SELECT pg_advisory_unlock_all()");
  Run(a, "SELECT pg_advisory_unlock_all()");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
}

// max_pinned_servers is the pod's: a client on another worker cannot pin a second server.
TEST_F(SessionStateTest, ThePinnedServerLimitHoldsForThePodAcrossWorkers) {
  PgfleetProcess fleet(Config("  max_pinned_servers: 1\n", 4, 2));
  ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
  auto a = Client(fleet);
  const std::string a_worker = SlotOf(admin, a);
  ASSERT_FALSE(a_worker.empty());
  ConnPtr b;
  for (int attempt = 0; attempt < 40 && b == nullptr; ++attempt) {
    auto c = Client(fleet);
    if (SlotOf(admin, c) != a_worker) b = std::move(c);
  }
  ASSERT_NE(b, nullptr) << "no client landed on the second worker in 40 connections";
  Run(a, "CREATE TEMP TABLE mine (n int)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  ResultPtr refused = Exec(b, "CREATE TEMP TABLE theirs (n int)");
  EXPECT_EQ(SqlState(refused), "53400") << ErrorOf(b);
  EXPECT_EQ(Value(b, "SELECT 1"), "1") << "the client goes on";
  // Released on one worker, the room is there for the other.
  Run(a, "DROP TABLE mine");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
  Run(b, "CREATE TEMP TABLE theirs (n int)");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
}

// Three listeners spread over two workers: each worker's LISTEN hub holds one server of the pool
// (4 for the pod: 2 hubs, 2 for everyone's transactions), and no listener holds one of its own.
TEST_F(SessionStateTest, ListenersOnTwoWorkersGetAnotherClientsNotifyWithinASecondUnpinned) {
  PgfleetProcess fleet(Config("", 4, /*workers=*/2));
  ASSERT_EQ(
      WaitFor([&] { return WorkerPids(fleet.pid()).size(); }, [](size_t n) { return n >= 2; }), 2u);
  // Clients until both workers have a listener (the kernel picks the worker; bounded at 40).
  std::vector<ConnPtr> listeners;
  std::set<std::string> slots;
  {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    for (int tries = 0; tries < 40 && (listeners.size() < 3 || slots.size() < 2); ++tries) {
      ConnPtr c = Client(fleet);
      const std::string slot = SlotOf(admin, c);
      ASSERT_FALSE(slot.empty());
      if (listeners.size() == 2 && slots.size() == 1 && slots.contains(slot)) continue;
      slots.insert(slot);
      listeners.push_back(std::move(c));
    }
  }
  ASSERT_EQ(listeners.size(), 3u);
  ASSERT_EQ(slots.size(), 2u);
  for (auto& listener : listeners) Run(listener, "LISTEN jobs");
  // Quoted, with a quote and upper case: the channel is exactly this text.
  Run(listeners[2], R"(LISTEN "Mixed ""Case""")");
  auto bystander = Client(fleet);
  Run(bystander, "LISTEN other");
  EXPECT_EQ(
      WaitFor([&] { return PoolColumn(fleet, "sv_listening"); }, [](int n) { return n == 2; }), 2);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 4);
  // SHOW CLIENTS: channels per client through the hub (jobs x3, the quoted one, other).
  {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    int channels = 0;
    for (const Row& row : RowsOf(Exec(admin, "SHOW CLIENTS"))) {
      channels += std::stoi(row.at("listening"));
    }
    EXPECT_EQ(channels, 5);
  }
  EXPECT_EQ(PinnedServers(fleet), 0);
  EXPECT_TRUE(PinReasons(fleet).empty());

  // The other clients' transactions go on meanwhile, the two remaining servers changing hands.
  auto notifier = Client(fleet);
  auto neighbour = Client(fleet);
  Run(neighbour, "BEGIN");
  (void)Pid(neighbour);
  const auto sent_at = std::chrono::steady_clock::now();
  Run(notifier, "NOTIFY jobs, 'hello ''quoted'''");
  for (auto& listener : listeners) {
    NotifyPtr notify = NextNotify(listener, std::chrono::seconds(1));
    ASSERT_NE(notify, nullptr) << "no notification within 1 s";
    EXPECT_STREQ(notify->relname, "jobs");
    EXPECT_STREQ(notify->extra, "hello 'quoted'");
    EXPECT_GT(notify->be_pid, 0);  // the NOTIFYing server backend's pid
  }
  EXPECT_LT(std::chrono::steady_clock::now() - sent_at, std::chrono::seconds(1));
  Run(neighbour, "COMMIT");
  Run(notifier, R"(SELECT pg_notify('Mixed "Case"', 'mixed'))");
  Run(notifier, "NOTIFY mixed, 'folded'");  // nobody listens on the case-folded name
  NotifyPtr mixed = NextNotify(listeners[2], std::chrono::seconds(1));
  ASSERT_NE(mixed, nullptr);
  EXPECT_STREQ(mixed->relname, "Mixed \"Case\"");
  EXPECT_STREQ(mixed->extra, "mixed");
  // Nothing reaches a client that did not LISTEN on the channel.
  EXPECT_EQ(NextNotify(listeners[2], std::chrono::milliseconds(200)), nullptr);
  EXPECT_EQ(NextNotify(listeners[0], std::chrono::milliseconds(50)), nullptr);
  EXPECT_EQ(NextNotify(listeners[1], std::chrono::milliseconds(50)), nullptr);
  EXPECT_EQ(NextNotify(bystander, std::chrono::milliseconds(50)), nullptr);
  Run(notifier, "NOTIFY other, 'yours'");
  NotifyPtr other = NextNotify(bystander, std::chrono::seconds(1));
  ASSERT_NE(other, nullptr);
  EXPECT_STREQ(other->relname, "other");

  // A listener inside a transaction gets the notification after the transaction, not inside it.
  Run(listeners[0], "BEGIN");
  (void)Pid(listeners[0]);
  Run(notifier, "NOTIFY jobs, 'later'");
  for (size_t i = 1; i < listeners.size(); ++i) {
    ASSERT_NE(NextNotify(listeners[i], std::chrono::seconds(1)), nullptr) << "listener " << i;
  }
  EXPECT_EQ(NextNotify(listeners[0], std::chrono::milliseconds(200)), nullptr);
  Run(listeners[0], "COMMIT");
  NotifyPtr later = NextNotify(listeners[0], std::chrono::seconds(1));
  ASSERT_NE(later, nullptr);
  EXPECT_STREQ(later->extra, "later");
  EXPECT_EQ(PinnedServers(fleet), 0);
}

TEST_F(SessionStateTest, UnlistenAndDisconnectStopDeliveryAndTheHubServerGoesBack) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto b = Client(fleet);
  auto notifier = Client(fleet);
  Run(a, "LISTEN jobs");
  Run(b, "LISTEN jobs");
  Run(b, "LISTEN audit");
  EXPECT_EQ(PoolColumn(fleet, "sv_listening"), 1);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 2);
  EXPECT_EQ(PinnedServers(fleet), 0);
  // The one other server serves everyone else, one transaction at a time.
  std::set<std::string> pids;
  for (int i = 0; i < 3; ++i) pids.insert(Pid(notifier));
  EXPECT_EQ(pids.size(), 1u);

  Run(a, "UNLISTEN jobs");
  Run(notifier, "NOTIFY jobs, 'one'");
  ASSERT_NE(NextNotify(b, std::chrono::seconds(1)), nullptr);
  EXPECT_EQ(NextNotify(a, std::chrono::milliseconds(200)), nullptr);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 1);

  // Listening again after UNLISTEN, then UNLISTEN *.
  Run(a, "LISTEN jobs");
  Run(notifier, "NOTIFY jobs, 'two'");
  ASSERT_NE(NextNotify(a, std::chrono::seconds(1)), nullptr);
  ASSERT_NE(NextNotify(b, std::chrono::seconds(1)), nullptr);
  Run(a, "UNLISTEN *");
  Run(notifier, "NOTIFY jobs, 'three'");
  ASSERT_NE(NextNotify(b, std::chrono::seconds(1)), nullptr);
  EXPECT_EQ(NextNotify(a, std::chrono::milliseconds(200)), nullptr);

  // The extended protocol's unnamed statement (psycopg 3, pgjdbc) goes to the hub too.
  ResultPtr extended(PQexecParams(a.get(), "LISTEN ext", 0, nullptr, nullptr, nullptr, nullptr, 0));
  ASSERT_TRUE(ResultOk(extended)) << ErrorOf(a);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 2);
  Run(notifier, "NOTIFY ext, 'e'");
  NotifyPtr ext = NextNotify(a, std::chrono::seconds(1));
  ASSERT_NE(ext, nullptr);
  EXPECT_STREQ(ext->extra, "e");
  extended.reset(PQexecParams(a.get(), "UNLISTEN ext", 0, nullptr, nullptr, nullptr, nullptr, 0));
  ASSERT_TRUE(ResultOk(extended)) << ErrorOf(a);
  EXPECT_EQ(PinnedServers(fleet), 0);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 1);

  // The last listener leaves: the hub's server UNLISTENs and serves transactions again.
  b.reset();
  EXPECT_EQ(
      WaitFor([&] { return PoolColumn(fleet, "sv_listening"); }, [](int n) { return n == 0; }), 0);
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 0);
  EXPECT_EQ(WaitFor(
                [&] {
                  return pg().QueryValue(
                      "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
                },
                [](const std::string& n) { return n == "0"; }),
            "0");
  Run(a, "BEGIN");
  pids.insert(Pid(a));
  pids.insert(Pid(notifier));  // the other server: both serve clients now
  Run(a, "COMMIT");
  EXPECT_EQ(pids.size(), 2u);

  // LISTEN inside a transaction block still pins the client's server, as before the hub.
  Run(a, "BEGIN; LISTEN pinned; COMMIT");
  ASSERT_TRUE(WaitForPinned(fleet, 1));
  EXPECT_EQ(PoolColumn(fleet, "sv_listening"), 0);
  Run(notifier, "NOTIFY pinned, 'direct'");
  NotifyPtr direct = NextNotify(a, std::chrono::seconds(1));
  ASSERT_NE(direct, nullptr);
  EXPECT_STREQ(direct->extra, "direct");
  Run(a, "UNLISTEN *");
  ASSERT_TRUE(WaitForPinned(fleet, 0));
}

TEST_F(SessionStateTest, UnlistenAndDiscardAllThroughAServerStopTheHubsDeliveries) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto notifier = Client(fleet);
  Run(a, "LISTEN jobs");
  Run(a, "LISTEN audit");
  // Inside a transaction block the UNLISTEN goes to a server; once it commits the hub stops too.
  Run(a, "BEGIN; UNLISTEN jobs; COMMIT");
  Run(notifier, "NOTIFY jobs, 'gone'");
  Run(notifier, "NOTIFY audit, 'kept'");
  NotifyPtr kept = NextNotify(a, std::chrono::seconds(1));
  ASSERT_NE(kept, nullptr);
  EXPECT_STREQ(kept->relname, "audit");
  EXPECT_EQ(NextNotify(a, std::chrono::milliseconds(200)), nullptr);
  // One rolled back changes nothing.
  Run(a, "BEGIN");
  Run(a, "UNLISTEN audit");
  Run(a, "ROLLBACK");
  Run(notifier, "NOTIFY audit, 'still'");
  ASSERT_NE(NextNotify(a, std::chrono::seconds(1)), nullptr);
  // DISCARD ALL is UNLISTEN * too.
  Run(a, "DISCARD ALL");
  EXPECT_EQ(PoolColumn(fleet, "cl_listening"), 0);
  EXPECT_EQ(
      WaitFor([&] { return PoolColumn(fleet, "sv_listening"); }, [](int n) { return n == 0; }), 0);
  Run(notifier, "NOTIFY audit, 'after discard'");
  EXPECT_EQ(NextNotify(a, std::chrono::milliseconds(200)), nullptr);
  EXPECT_EQ(PinnedServers(fleet), 0);
}

TEST_F(SessionStateTest, TheHubListensAgainOnANewServerWhenItsServerDies) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto notifier = Client(fleet);
  Run(a, "LISTEN jobs");
  // SHOW SERVERS shows the hub's server as listening, and PostgreSQL as the LISTEN it ran.
  {
    ConnPtr admin = Connect(fleet.ConnString("admin", "pgfleet"));
    int listening = 0;
    for (const Row& row : RowsOf(Exec(admin, "SHOW SERVERS"))) {
      if (row.at("state") == "listening") ++listening;
    }
    EXPECT_EQ(listening, 1);
  }
  const std::string hub_pid = pg().QueryValue(
      "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN \"jobs\"' AND state = 'idle'");
  ASSERT_FALSE(hub_pid.empty());
  ASSERT_EQ(pg().QueryValue("SELECT pg_terminate_backend(" + hub_pid + ")"), "t");
  // Another server takes over and LISTENs again (the notifications in between are lost).
  const std::string new_pid = WaitFor(
      [&] {
        return pg().QueryValue(
            "SELECT coalesce(max(pid)::text, '') FROM pg_stat_activity WHERE query = "
            "'LISTEN \"jobs\"' AND state = 'idle' AND pid <> " +
            hub_pid);
      },
      [](const std::string& pid) { return !pid.empty(); });
  ASSERT_FALSE(new_pid.empty());
  EXPECT_EQ(PoolColumn(fleet, "sv_listening"), 1);
  Run(notifier, "NOTIFY jobs, 'again'");
  NotifyPtr again = NextNotify(a, std::chrono::seconds(1));
  ASSERT_NE(again, nullptr);
  EXPECT_STREQ(again->extra, "again");
  EXPECT_EQ(Value(a, "SELECT 1"), "1");  // the listener never noticed
}

TEST_F(SessionStateTest, APipelinedQueryWaitsBehindAListenThatWaitsForTheHubsServer) {
  PgfleetProcess fleet(Config());
  auto a = Client(fleet);
  auto notifier = Client(fleet);
  // The pool's first LISTEN: its answer waits for the hub's server; the query pipelined behind it
  // is answered after it, in order.
  ASSERT_EQ(PQenterPipelineMode(a.get()), 1);
  ASSERT_EQ(PQsendQueryParams(a.get(), "LISTEN piped", 0, nullptr, nullptr, nullptr, nullptr, 0),
            1);
  ASSERT_EQ(PQpipelineSync(a.get()), 1);
  ASSERT_EQ(PQsendQueryParams(a.get(), "SELECT 42", 0, nullptr, nullptr, nullptr, nullptr, 0), 1);
  ASSERT_EQ(PQpipelineSync(a.get()), 1);
  const ExecStatusType expected[] = {PGRES_COMMAND_OK, PGRES_PIPELINE_SYNC, PGRES_TUPLES_OK,
                                     PGRES_PIPELINE_SYNC};
  for (ExecStatusType status : expected) {
    ResultPtr r(PQgetResult(a.get()));
    ASSERT_NE(r, nullptr) << ErrorOf(a);
    ASSERT_EQ(PQresultStatus(r.get()), status) << ErrorOf(a);
    if (status == PGRES_TUPLES_OK) {
      EXPECT_STREQ(PQgetvalue(r.get(), 0, 0), "42");
    }
    if (status != PGRES_PIPELINE_SYNC) {
      ResultPtr end(PQgetResult(a.get()));
      EXPECT_EQ(end, nullptr);
    }
  }
  ASSERT_EQ(PQexitPipelineMode(a.get()), 1) << ErrorOf(a);
  EXPECT_EQ(PoolColumn(fleet, "sv_listening"), 1);
  EXPECT_EQ(PinnedServers(fleet), 0);
  Run(notifier, "NOTIFY piped, 'p'");
  ASSERT_NE(NextNotify(a, std::chrono::seconds(1)), nullptr);
}

TEST_F(SessionStateTest, RefuseAnswersSessionStatementsWithAnErrorAndPassRelaysThem) {
  {
    PgfleetProcess fleet(Config("  session_state: refuse\n"));
    auto a = Client(fleet);
    ResultPtr refused = Exec(a, "SET statement_timeout = 1000");
    EXPECT_EQ(SqlState(refused), "0A000");
    EXPECT_THAT(ErrorOf(a), HasSubstr("session_state: refuse"));
    EXPECT_EQ(SqlState(Exec(a, "LISTEN jobs")), "0A000");
    ResultPtr extended(
        PQexecParams(a.get(), "SET work_mem = '8MB'", 0, nullptr, nullptr, nullptr, nullptr, 0));
    EXPECT_EQ(SqlState(extended), "0A000");
    EXPECT_EQ(Value(a, "SHOW work_mem"), "4MB");
    Run(a, "BEGIN");
    Run(a, "SET LOCAL statement_timeout = 1000");
    EXPECT_EQ(Value(a, "SHOW statement_timeout"), "1s");
    Run(a, "COMMIT");
    EXPECT_EQ(Value(a, "SHOW statement_timeout"), "0");
    EXPECT_EQ(PinnedServers(fleet), 0);
  }
  {
    // pass: relayed as PgBouncer does; nothing is tracked, nothing is pinned.
    PgfleetProcess fleet(Config("  session_state: pass\n"));
    auto a = Client(fleet);
    auto neighbour = Client(fleet);
    Run(a, "SET statement_timeout = 1000");
    Run(a, "CREATE TEMP TABLE t (n int)");
    Run(a, "LISTEN jobs");  // to whatever server, as in PgBouncer: no hub
    EXPECT_EQ(PinnedServers(fleet), 0);
    EXPECT_EQ(PoolColumn(fleet, "sv_listening"), 0);
    Run(neighbour, "BEGIN");
    const std::string neighbour_pid = Pid(neighbour);
    EXPECT_NE(Pid(a), neighbour_pid);
    Run(neighbour, "COMMIT");
  }
}

}  // namespace
}  // namespace pgfleet::testing
