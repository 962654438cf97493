// Protocol-level named prepared statements in transaction mode: statements follow the client
// across servers, survive a server restart, and are renamed transparently.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/raw_client.h"

namespace pgfleet::testing {
namespace {

using ::testing::HasSubstr;

class PreparedTest : public IntegrationTest {
 protected:
  std::string Config(int pool_size, int max_prepared = 200) {
    return PoolConfig("transaction", pool_size,
                      absl::StrCat("  max_prepared_statements: ", max_prepared, "\n"));
  }
};

TEST_F(PreparedTest, StatementsFollowClientsAcrossServers) {
  PgfleetProcess fleet(Config(2));
  constexpr int kClients = 20;
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = Connect(fleet.ConnString());
      if (!Ok(c)) {
        ++failed;
        return;
      }
      std::string name = "stmt_" + std::to_string(i % 3);
      ResultPtr prep(
          PQprepare(c.get(), name.c_str(), "SELECT $1::int + 1, pg_backend_pid()", 1, nullptr));
      if (PQresultStatus(prep.get()) != PGRES_COMMAND_OK) {
        ++failed;
        return;
      }
      for (int n = 0; n < 50; ++n) {
        std::string v = std::to_string(n);
        const char* values[] = {v.c_str()};
        ResultPtr r(PQexecPrepared(c.get(), name.c_str(), 1, values, nullptr, nullptr, 0));
        if (PQresultStatus(r.get()) == PGRES_TUPLES_OK &&
            std::string(PQgetvalue(r.get(), 0, 0)) == std::to_string(n + 1)) {
          ++ok;
        } else {
          ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0) << fleet.Log().substr(0, 3000);
  EXPECT_EQ(ok.load(), kClients * 50);
}

TEST_F(PreparedTest, StatementsSurviveAPostgresRestart) {
  PgfleetProcess fleet(Config(2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ResultPtr prep(PQprepare(c.get(), "s1", "SELECT 'before'::text || $1", 1, nullptr));
  ASSERT_EQ(PQresultStatus(prep.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  const char* values[] = {"x"};
  ResultPtr r1(PQexecPrepared(c.get(), "s1", 1, values, nullptr, nullptr, 0));
  ASSERT_EQ(std::string(PQgetvalue(r1.get(), 0, 0)), "beforex");
  pg().Restart();
  // The pool's servers died with PostgreSQL; the next server lacks the statement and gets it
  // re-parsed transparently. The first try may meet a dead server: retry once.
  ResultPtr r2(PQexecPrepared(c.get(), "s1", 1, values, nullptr, nullptr, 0));
  if (PQresultStatus(r2.get()) != PGRES_TUPLES_OK) {
    c = Connect(fleet.ConnString());
    ResultPtr again(PQprepare(c.get(), "s1", "SELECT 'before'::text || $1", 1, nullptr));
    r2.reset(PQexecPrepared(c.get(), "s1", 1, values, nullptr, nullptr, 0));
  }
  ResultPtr r3(PQexecPrepared(c.get(), "s1", 1, values, nullptr, nullptr, 0));
  ASSERT_EQ(PQresultStatus(r3.get()), PGRES_TUPLES_OK) << ErrorOf(c);
  EXPECT_EQ(std::string(PQgetvalue(r3.get(), 0, 0)), "beforex");
}

TEST_F(PreparedTest, DescribeReturnsParameterAndRowDescriptions) {
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ResultPtr prep(PQprepare(c.get(), "d1", "SELECT $1::int AS a, $2::text AS b", 2, nullptr));
  ASSERT_EQ(PQresultStatus(prep.get()), PGRES_COMMAND_OK);
  // Another client takes the server in between, so describe may need a re-parse elsewhere.
  auto other = Connect(fleet.ConnString());
  EXPECT_EQ(Value(other, "SELECT 1"), "1");
  ResultPtr d(PQdescribePrepared(c.get(), "d1"));
  ASSERT_EQ(PQresultStatus(d.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  EXPECT_EQ(PQnparams(d.get()), 2);
  EXPECT_EQ(PQparamtype(d.get(), 0), 23u);  // int4
  EXPECT_EQ(PQparamtype(d.get(), 1), 25u);  // text
  EXPECT_EQ(PQnfields(d.get()), 2);
  EXPECT_EQ(std::string(PQfname(d.get(), 0)), "a");
  EXPECT_EQ(std::string(PQfname(d.get(), 1)), "b");
}

TEST_F(PreparedTest, CloseThenReparseSameNameWithDifferentQuery) {
  PgfleetProcess fleet(Config(1));
  RawClient c;
  ASSERT_TRUE(c.Connect(fleet.port(), "postgres", "postgres")) << c.error();
  ASSERT_TRUE(c.Send(RawClient::Parse("same", "SELECT 'first'") + RawClient::Bind("same") +
                     RawClient::Execute() + RawClient::Sync()));
  auto first = c.ReadUntilReady();
  EXPECT_EQ(Types(first), "12DCZ");
  ASSERT_GE(first.size(), 3u);
  EXPECT_NE(first[2].body.find("first"), std::string::npos);
  // Protocol Close, then the same name for another query, in one pipeline.
  ASSERT_TRUE(c.Send(RawClient::Close('S', "same") + RawClient::Parse("same", "SELECT 'second'") +
                     RawClient::Bind("same") + RawClient::Execute() + RawClient::Sync()));
  auto second = c.ReadUntilReady();
  EXPECT_EQ(Types(second), "312DCZ");
  ASSERT_GE(second.size(), 4u);
  EXPECT_NE(second[3].body.find("second"), std::string::npos);
}

TEST_F(PreparedTest, StatementAlreadyOnServerGetsParseCompleteInOrder) {
  PgfleetProcess fleet(Config(1));
  RawClient a;
  RawClient b;
  ASSERT_TRUE(a.Connect(fleet.port(), "postgres", "postgres")) << a.error();
  ASSERT_TRUE(b.Connect(fleet.port(), "postgres", "postgres")) << b.error();
  ASSERT_TRUE(a.Send(RawClient::Parse("x", "SELECT 42") + RawClient::Sync()));
  EXPECT_EQ(Types(a.ReadUntilReady()), "1Z");
  // b prepares the same query under its own name: the one server has it, so pgfleet answers
  // ParseComplete itself, between the responses it does forward.
  ASSERT_TRUE(b.Send(RawClient::Parse("mine", "SELECT 42") + RawClient::Describe('S', "mine") +
                     RawClient::Bind("mine") + RawClient::Execute() + RawClient::Sync()));
  EXPECT_EQ(Types(b.ReadUntilReady()), "1tT2DCZ");
  ASSERT_TRUE(a.Send(RawClient::Bind("x") + RawClient::Execute() + RawClient::Sync()));
  EXPECT_EQ(Types(a.ReadUntilReady()), "2DCZ");
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                            "'client backend' AND pid <> pg_backend_pid() AND backend_start >= '" +
                            test_start_ + "' AND application_name <> '" +
                            PgServer::kProbeApplicationName + "'"),
            "1");
}

TEST_F(PreparedTest, DeallocateAllFromClientForgetsStatements) {
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ResultPtr p(PQprepare(c.get(), "gone", "SELECT 1", 0, nullptr));
  ASSERT_EQ(PQresultStatus(p.get()), PGRES_COMMAND_OK);
  ASSERT_TRUE(ResultOk(Exec(c, "DEALLOCATE ALL")));
  ResultPtr e(PQexecPrepared(c.get(), "gone", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_NE(PQresultStatus(e.get()), PGRES_TUPLES_OK);
  EXPECT_THAT(ErrorOf(c), HasSubstr("prepared statement \"gone\" does not exist"));
  // The server still works for others, and re-preparing works.
  auto d = Connect(fleet.ConnString());
  ResultPtr again(PQprepare(d.get(), "gone", "SELECT 2", 0, nullptr));
  ASSERT_EQ(PQresultStatus(again.get()), PGRES_COMMAND_OK) << ErrorOf(d);
  ResultPtr e2(PQexecPrepared(d.get(), "gone", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(std::string(PQgetvalue(e2.get(), 0, 0)), "2");
}

TEST_F(PreparedTest, EvictionKeepsServerUnderTheLimit) {
  PgfleetProcess fleet(Config(1, 5));
  auto c = Connect(fleet.ConnString());
  for (int i = 0; i < 20; ++i) {
    std::string name = "e" + std::to_string(i);
    std::string sql = "SELECT " + std::to_string(i) + " AS v";
    ResultPtr p(PQprepare(c.get(), name.c_str(), sql.c_str(), 0, nullptr));
    ASSERT_EQ(PQresultStatus(p.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  }
  // Every statement still works (evicted ones are re-parsed), and the server holds at most 5.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 20; ++i) {
      std::string name = "e" + std::to_string(i);
      ResultPtr r(PQexecPrepared(c.get(), name.c_str(), 0, nullptr, nullptr, nullptr, 0));
      ASSERT_EQ(PQresultStatus(r.get()), PGRES_TUPLES_OK) << ErrorOf(c);
      EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), std::to_string(i));
    }
  }
  EXPECT_LE(std::stoi(Value(c, "SELECT count(*) FROM pg_prepared_statements")), 5);
}

TEST_F(PreparedTest, FailedParseReportsErrorAndServerStaysUsable) {
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ResultPtr bad(PQprepare(c.get(), "broken", "SELECT * FROM no_such_table_here", 0, nullptr));
  EXPECT_EQ(PQresultStatus(bad.get()), PGRES_FATAL_ERROR);
  EXPECT_THAT(ErrorOf(c), HasSubstr("no_such_table_here"));
  ResultPtr good(PQprepare(c.get(), "fine", "SELECT 7", 0, nullptr));
  ASSERT_EQ(PQresultStatus(good.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  ResultPtr r(PQexecPrepared(c.get(), "fine", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), "7");
}

TEST_F(PreparedTest, FailedHiddenReparseIsTheErrorOfTheMessageThatNeededIt) {
  pg().Exec("DROP TABLE IF EXISTS reparse_t; CREATE TABLE reparse_t (v int)");
  PgfleetProcess fleet(Config(2));
  RawClient a;
  ASSERT_TRUE(a.Connect(fleet.port(), "postgres", "postgres")) << a.error();
  ASSERT_TRUE(a.Send(RawClient::Parse("s", "SELECT count(*) FROM reparse_t") + RawClient::Sync()));
  EXPECT_EQ(Types(a.ReadUntilReady()), "1Z");
  // b holds the one server that has "s" in a transaction, so a's Bind goes to a new server,
  // where pgfleet must parse "s" first: by then the table is gone and that Parse fails.
  auto b = Connect(fleet.ConnString());
  ASSERT_TRUE(ResultOk(Exec(b, "BEGIN")));
  pg().Exec("DROP TABLE reparse_t");
  ASSERT_TRUE(a.Send(RawClient::Bind("s") + RawClient::Execute() + RawClient::Sync()));
  auto failed = a.ReadUntilReady();
  ASSERT_EQ(Types(failed), "EZ");
  EXPECT_NE(failed[0].body.find("reparse_t"), std::string::npos) << failed[0].body;
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                            "'client backend' AND pid <> pg_backend_pid() AND backend_start >= '" +
                            test_start_ + "' AND application_name <> '" +
                            PgServer::kProbeApplicationName + "'"),
            "2");
  // The new server stays usable, and the statement whose Parse failed is not taken as present
  // there: once the table is back, the next Bind on it gets the statement parsed again.
  ASSERT_TRUE(a.Send(RawClient::Parse("", "SELECT 5") + RawClient::Bind("") + RawClient::Execute() +
                     RawClient::Sync()));
  EXPECT_EQ(Types(a.ReadUntilReady()), "12DCZ");
  pg().Exec("CREATE TABLE reparse_t (v int)");
  ASSERT_TRUE(a.Send(RawClient::Bind("s") + RawClient::Execute() + RawClient::Sync()));
  EXPECT_EQ(Types(a.ReadUntilReady()), "2DCZ");
  ASSERT_TRUE(ResultOk(Exec(b, "COMMIT")));
  pg().Exec("DROP TABLE reparse_t");
}

// PostgreSQL answers a Bind or Describe of a statement the session never prepared with ERROR
// 26000, and the session goes on; so must pgfleet.
TEST_F(PreparedTest, UnknownStatementIsAnErrorAndTheConnectionGoesOn) {
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  ResultPtr bind(PQexecPrepared(c.get(), "never_prepared", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(PQresultStatus(bind.get()), PGRES_FATAL_ERROR);
  EXPECT_EQ(SqlState(bind), "26000");
  EXPECT_STREQ(PQresultErrorField(bind.get(), PG_DIAG_SEVERITY_NONLOCALIZED), "ERROR");
  EXPECT_THAT(ErrorOf(c), HasSubstr("prepared statement \"never_prepared\" does not exist"));
  ASSERT_EQ(PQstatus(c.get()), CONNECTION_OK);
  EXPECT_EQ(Value(c, "SELECT 'still here'"), "still here");
  ResultPtr describe(PQdescribePrepared(c.get(), "never_prepared"));
  EXPECT_EQ(SqlState(describe), "26000");
  EXPECT_EQ(Value(c, "SELECT 'and here'"), "and here");
  // A closed statement is gone the same way.
  ResultPtr p(PQprepare(c.get(), "closed_one", "SELECT 1", 0, nullptr));
  ASSERT_EQ(PQresultStatus(p.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  ASSERT_TRUE(ResultOk(Exec(c, "DEALLOCATE closed_one")));
  ResultPtr closed(PQexecPrepared(c.get(), "closed_one", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(SqlState(closed), "26000");
  EXPECT_EQ(Value(c, "SELECT 'after close'"), "after close");
}

// After an ERROR in extended protocol the server skips to the Sync, and the Sync rolls back what
// the batch did before the error: an unknown statement must fail the batch as PostgreSQL fails
// it, not only the client's view of it.
TEST_F(PreparedTest, UnknownStatementRollsBackItsBatchAsPostgresDoes) {
  pg().Exec("DROP TABLE IF EXISTS unknown_batch; CREATE TABLE unknown_batch (id int)");
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  ASSERT_EQ(PQenterPipelineMode(c.get()), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "INSERT INTO unknown_batch VALUES (1)", 0, nullptr, nullptr,
                              nullptr, nullptr, 0),
            1);
  ASSERT_EQ(PQsendQueryPrepared(c.get(), "never_prepared", 0, nullptr, nullptr, nullptr, 0), 1);
  ASSERT_EQ(PQsendQueryParams(c.get(), "INSERT INTO unknown_batch VALUES (2)", 0, nullptr, nullptr,
                              nullptr, nullptr, 0),
            1);
  ASSERT_EQ(PQpipelineSync(c.get()), 1);
  std::vector<std::string> outcomes;
  while (outcomes.size() < 4) {
    PGresult* r = PQgetResult(c.get());
    if (r == nullptr) continue;  // between the queries' results
    const ExecStatusType status = PQresultStatus(r);
    outcomes.push_back(status == PGRES_FATAL_ERROR
                           ? SqlState(ResultPtr(r))
                           : (PQclear(r), std::string(PQresStatus(status))));
    if (status == PGRES_PIPELINE_SYNC) break;
  }
  EXPECT_THAT(outcomes, ::testing::ElementsAre("PGRES_COMMAND_OK", "26000",
                                               "PGRES_PIPELINE_ABORTED", "PGRES_PIPELINE_SYNC"));
  ASSERT_EQ(PQexitPipelineMode(c.get()), 1) << ErrorOf(c);
  EXPECT_EQ(pg().QueryValue("SELECT count(*) FROM unknown_batch"), "0");
  EXPECT_EQ(Value(c, "SELECT count(*) FROM unknown_batch"), "0");
}

// A name re-used for another query is ERROR 42P05, and the name keeps its query; a Parse that
// failed gives no name, so the name is free for the next Parse.
TEST_F(PreparedTest, ReusedNameIsAnErrorAndAFailedParseLeavesTheNameFree) {
  PgfleetProcess fleet(Config(1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  ResultPtr first(PQprepare(c.get(), "taken", "SELECT 'first'", 0, nullptr));
  ASSERT_EQ(PQresultStatus(first.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  ResultPtr again(PQprepare(c.get(), "taken", "SELECT 'other'", 0, nullptr));
  EXPECT_EQ(SqlState(again), "42P05");
  EXPECT_STREQ(PQresultErrorField(again.get(), PG_DIAG_SEVERITY_NONLOCALIZED), "ERROR");
  EXPECT_THAT(ErrorOf(c), HasSubstr("prepared statement \"taken\" already exists"));
  ASSERT_EQ(PQstatus(c.get()), CONNECTION_OK);
  ResultPtr run(PQexecPrepared(c.get(), "taken", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(std::string(PQgetvalue(run.get(), 0, 0)), "first") << ErrorOf(c);

  ResultPtr bad(PQprepare(c.get(), "retry", "SELEC 'typo'", 0, nullptr));
  EXPECT_EQ(SqlState(bad), "42601");
  ResultPtr fixed(PQprepare(c.get(), "retry", "SELECT 'fixed'", 0, nullptr));
  ASSERT_EQ(PQresultStatus(fixed.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  ResultPtr r(PQexecPrepared(c.get(), "retry", 0, nullptr, nullptr, nullptr, 0));
  EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), "fixed") << ErrorOf(c);
  // The same on the wire: a Parse that fails (and one skipped after an error) leaves its name
  // free, and a re-used name fails only its own batch.
  RawClient raw;
  ASSERT_TRUE(raw.Connect(fleet.port(), "postgres", "postgres")) << raw.error();
  ASSERT_TRUE(raw.Send(RawClient::Parse("n", "SELEC 1") + RawClient::Parse("m", "SELECT 'm'") +
                       RawClient::Sync()));
  EXPECT_EQ(Types(raw.ReadUntilReady()), "EZ");
  ASSERT_TRUE(raw.Send(RawClient::Parse("n", "SELECT 'n'") + RawClient::Parse("m", "SELECT 'm2'") +
                       RawClient::Bind("n") + RawClient::Execute() + RawClient::Sync()));
  EXPECT_EQ(Types(raw.ReadUntilReady()), "112DCZ");
  ASSERT_TRUE(raw.Send(RawClient::Parse("n", "SELECT 'other'") + RawClient::Bind("n") +
                       RawClient::Execute() + RawClient::Sync()));
  auto reused = raw.ReadUntilReady();
  ASSERT_EQ(Types(reused), "EZ");
  EXPECT_NE(reused[0].body.find("42P05"), std::string::npos);
  ASSERT_TRUE(raw.Send(RawClient::Bind("m") + RawClient::Execute() + RawClient::Sync()));
  auto m = raw.ReadUntilReady();
  ASSERT_EQ(Types(m), "2DCZ");
  EXPECT_NE(m[1].body.find("m2"), std::string::npos);
}

TEST_F(PreparedTest, PgbenchPreparedModeRunsWithoutErrors) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(Config(2));
  const std::string out_path = fleet.dir() + "/pgbench.out";
  // One thread per client: pgbench prepares synchronously, so a thread blocked in one client's
  // PQprepare (queued for a server) would stall its other clients that hold servers mid-
  // transaction, a deadlock inside pgbench whatever the pooler does.
  RunCommand(absl::StrCat("pgbench -n -M prepared -c 20 -j 20 -T 12 -h 127.0.0.1 -p ", fleet.port(),
                          " -U postgres postgres > ", out_path, " 2>&1; echo exit=$? >> ",
                          out_path));
  std::string out = RunCommandOutput("cat " + out_path);
  EXPECT_THAT(out, HasSubstr("exit=0")) << out;
  EXPECT_THAT(out, HasSubstr("number of failed transactions: 0 (0.000%)")) << out;
}

}  // namespace
}  // namespace pgfleet::testing
