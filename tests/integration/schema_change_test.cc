// Named prepared statements after a schema change (docs/architecture.md, "Prepared statements
// after a schema change"): every Parse, Describe, Bind and Execute through pgfleet answers as
// PostgreSQL answers the same client directly. Each scenario runs twice, once directly against
// PostgreSQL and once through pgfleet (one worker and two, a pool of one server so that the
// statements meet the server that holds the old analysis), with its DDL sent through pgfleet or
// around it, and the two lists of answers must be equal.
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/raw_client.h"

namespace pgfleet::testing {
namespace {

// An answer as a string: what a driver would see of it. Type OIDs of user types (created per
// run) are written as "u".
std::string TypeOf(Oid oid) { return oid >= 16384 ? "u" : std::to_string(oid); }

std::string ErrorAnswer(const ResultPtr& r) { return "ERROR " + SqlState(r); }

// One client's answers, appended to `log`.
class Client {
 public:
  Client(const std::string& conninfo, std::vector<std::string>* log)
      : conn_(Connect(conninfo)), log_(log) {}
  bool ok() const { return Ok(conn_); }
  std::string error() const { return ErrorOf(conn_); }

  void Prepare(const std::string& name, const std::string& sql) {
    ResultPtr r(PQprepare(conn_.get(), name.c_str(), sql.c_str(), 0, nullptr));
    log_->push_back("prepare " + name + ": " +
                    (PQresultStatus(r.get()) == PGRES_COMMAND_OK ? "ok" : ErrorAnswer(r)));
  }
  void Describe(const std::string& name) {
    ResultPtr r(PQdescribePrepared(conn_.get(), name.c_str()));
    std::string answer = "describe " + name + ": ";
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      answer += ErrorAnswer(r);
    } else {
      answer += "params";
      for (int i = 0; i < PQnparams(r.get()); ++i) answer += " " + TypeOf(PQparamtype(r.get(), i));
      answer += " columns";
      for (int i = 0; i < PQnfields(r.get()); ++i) {
        answer += absl::StrCat(" ", PQfname(r.get(), i), ":", TypeOf(PQftype(r.get(), i)));
      }
    }
    log_->push_back(answer);
  }
  void Execute(const std::string& name, const std::vector<std::string>& params = {}) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    ResultPtr r(PQexecPrepared(conn_.get(), name.c_str(), static_cast<int>(values.size()),
                               values.data(), nullptr, nullptr, 0));
    log_->push_back("execute " + name + ": " + Rows(r));
  }
  // A driver's first use of a statement: Parse, Describe, then Bind and Execute.
  void PrepareDescribeExecute(const std::string& name, const std::string& sql,
                              const std::vector<std::string>& params = {}) {
    Prepare(name, sql);
    Describe(name);
    Execute(name, params);
  }
  // psycopg's way to drop a statement: DEALLOCATE in SQL.
  void Deallocate(const std::string& name) { Run("DEALLOCATE " + name); }
  void Run(const std::string& sql) {
    ResultPtr r(PQexec(conn_.get(), sql.c_str()));
    log_->push_back(sql.substr(0, 40) + ": " + Rows(r));
  }

 private:
  static std::string Rows(const ResultPtr& r) {
    const auto status = PQresultStatus(r.get());
    if (status == PGRES_COMMAND_OK) return "ok";
    if (status != PGRES_TUPLES_OK) return ErrorAnswer(r);
    std::string out = absl::StrCat(PQnfields(r.get()), " columns");
    for (int row = 0; row < PQntuples(r.get()); ++row) {
      out += " |";
      for (int col = 0; col < PQnfields(r.get()); ++col) {
        out += " ";
        out += PQgetisnull(r.get(), row, col) ? "null" : PQgetvalue(r.get(), row, col);
      }
    }
    return out;
  }

  ConnPtr conn_;
  std::vector<std::string>* log_;
};

// Where a scenario's clients and its DDL connect.
struct Route {
  std::string clients;
  std::string ddl;
};

using Scenario = std::function<void(const Route&, std::vector<std::string>*)>;

class SchemaChangeTest : public IntegrationTest,
                         public ::testing::WithParamInterface<std::tuple<int, bool>> {
 protected:
  int workers() const { return std::get<0>(GetParam()); }
  bool ddl_through_pgfleet() const { return std::get<1>(GetParam()); }

  std::string Config() const {
    return absl::StrCat(
        "workers: ", workers(),
        "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", PgServer::Shared().port(),
        "}\npool:\n  pool_mode: transaction\n  default_pool_size: 1\n"
        "  max_prepared_statements: 100\n");
  }

  // The scenario's answers directly and through pgfleet (run after it, on a schema set up anew by
  // `setup`).
  void ExpectSameAnswers(const std::string& setup, const Scenario& scenario) {
    const std::string direct = pg().ConnString();
    std::vector<std::string> expected;
    ASSERT_EQ(Value(Connect(direct), setup + "; SELECT 'ready'"), "ready");
    scenario(Route{direct, direct}, &expected);

    PgfleetProcess fleet(Config());
    if (workers() > 1) {
      ASSERT_EQ(WaitFor([&] { return WorkerPids(fleet.pid()).size(); },
                        [&](size_t n) { return n >= static_cast<size_t>(workers()); },
                        std::chrono::seconds(10)),
                static_cast<size_t>(workers()));
    }
    std::vector<std::string> through;
    ASSERT_EQ(Value(Connect(direct), setup + "; SELECT 'ready'"), "ready");
    scenario(Route{fleet.ConnString(), ddl_through_pgfleet() ? fleet.ConnString() : direct},
             &through);
    EXPECT_THAT(through, ::testing::ElementsAreArray(expected)) << fleet.Log().substr(0, 4000);
  }
};

// A column dropped: the client's own statement fails as PostgreSQL fails it (0A000); its
// Parse after DEALLOCATE, and a new client's, describe and return the new columns.
TEST_P(SchemaChangeTest, ColumnDropped) {
  ExpectSameAnswers(
      "DROP TABLE IF EXISTS sc_drop; CREATE TABLE sc_drop (a int, b text, c int); "
      "INSERT INTO sc_drop VALUES (1, 'x', 2)",
      [](const Route& route, std::vector<std::string>* log) {
        Client first(route.clients, log);
        ASSERT_TRUE(first.ok()) << first.error();
        first.PrepareDescribeExecute("s", "SELECT * FROM sc_drop");
        Client(route.ddl, log).Run("ALTER TABLE sc_drop DROP COLUMN b");
        first.Execute("s");
        first.Deallocate("s");
        first.PrepareDescribeExecute("s", "SELECT * FROM sc_drop");
        Client second(route.clients, log);
        second.PrepareDescribeExecute("t", "SELECT * FROM sc_drop");
      });
}

// An enum type dropped and created again: its new OID in every description after a re-Parse.
TEST_P(SchemaChangeTest, EnumRecreated) {
  ExpectSameAnswers(
      "DROP TABLE IF EXISTS sc_enum; DROP TYPE IF EXISTS sc_mood; "
      "CREATE TYPE sc_mood AS ENUM ('happy', 'sad'); CREATE TABLE sc_enum (m sc_mood); "
      "INSERT INTO sc_enum VALUES ('happy')",
      [](const Route& route, std::vector<std::string>* log) {
        Client first(route.clients, log);
        ASSERT_TRUE(first.ok()) << first.error();
        first.PrepareDescribeExecute("e", "SELECT m, m::text AS t FROM sc_enum WHERE m <> $1",
                                     {"sad"});
        Client(route.ddl, log)
            .Run(
                "DROP TABLE sc_enum; DROP TYPE sc_mood; "
                "CREATE TYPE sc_mood AS ENUM ('happy', 'sad', 'ok'); "
                "CREATE TABLE sc_enum (m sc_mood); INSERT INTO sc_enum VALUES ('ok')");
        first.Execute("e", {"sad"});
        first.Deallocate("e");
        first.PrepareDescribeExecute("e", "SELECT m, m::text AS t FROM sc_enum WHERE m <> $1",
                                     {"sad"});
        Client second(route.clients, log);
        second.Prepare("f", "SELECT m, m::text AS t FROM sc_enum WHERE m <> $1");
        second.Execute("f", {"happy"});
      });
}

// A column's type changed from int to boolean: no statement fails by itself (the old one keeps
// its int parameter, as in PostgreSQL), and a Parse after DEALLOCATE describes a boolean.
TEST_P(SchemaChangeTest, ParameterTypeChanged) {
  ExpectSameAnswers(
      "DROP TABLE IF EXISTS sc_type; CREATE TABLE sc_type (v int)",
      [](const Route& route, std::vector<std::string>* log) {
        Client first(route.clients, log);
        ASSERT_TRUE(first.ok()) << first.error();
        first.PrepareDescribeExecute("i", "INSERT INTO sc_type (v) VALUES ($1)", {"1"});
        Client(route.ddl, log).Run("ALTER TABLE sc_type ALTER COLUMN v TYPE boolean USING v <> 0");
        first.Execute("i", {"true"});
        first.Deallocate("i");
        first.PrepareDescribeExecute("i", "INSERT INTO sc_type (v) VALUES ($1)", {"true"});
        first.Run("SELECT v FROM sc_type ORDER BY v");
      });
}

// Two clients, each with its own temporary table of one name and other columns, one after the
// other on the pool's one server: each one's statement reads its own table.
TEST_P(SchemaChangeTest, TemporaryTablesOfOneName) {
  ExpectSameAnswers("SELECT 1", [](const Route& route, std::vector<std::string>* log) {
    for (const std::string columns : {"a int", "x text, y text"}) {
      Client client(route.clients, log);
      ASSERT_TRUE(client.ok()) << client.error();
      client.Run("BEGIN");
      client.Run("CREATE TEMP TABLE sc_tmp (" + columns + ") ON COMMIT DROP");
      client.PrepareDescribeExecute("q", "SELECT * FROM sc_tmp");
      client.Run("COMMIT");
    }
  });
}

// DDL and a Parse of a text prepared before it, in one transaction: the Parse sees the DDL.
TEST_P(SchemaChangeTest, ParseAfterDdlInTheSameTransaction) {
  ExpectSameAnswers(
      "DROP TABLE IF EXISTS sc_tx; CREATE TABLE sc_tx (a int, b int); INSERT INTO sc_tx VALUES (1, "
      "2)",
      [](const Route& route, std::vector<std::string>* log) {
        Client other(route.clients, log);
        ASSERT_TRUE(other.ok()) << other.error();
        other.Prepare("o", "SELECT * FROM sc_tx");
        other.Execute("o");
        Client client(route.clients, log);
        client.Run("BEGIN");
        client.Run("ALTER TABLE sc_tx ADD COLUMN c int DEFAULT 3");
        client.PrepareDescribeExecute("n", "SELECT * FROM sc_tx");
        client.Run("COMMIT");
      });
}

INSTANTIATE_TEST_SUITE_P(WorkersAndDdlRoute, SchemaChangeTest,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return absl::StrCat(
                               std::get<0>(info.param), "Workers",
                               std::get<1>(info.param) ? "DdlThroughPgfleet" : "DdlDirect");
                         });

class SchemaChangeProtocolTest : public IntegrationTest {};

// pgx and pgjdbc drop a statement with the protocol's Close (not DEALLOCATE) and Parse it again
// after "cached plan must not change result type": the new Parse is analysed afresh.
TEST_F(SchemaChangeProtocolTest, CloseThenParseAfterAStalePlanErrorSeesTheNewColumns) {
  ASSERT_EQ(Value(Connect(pg().ConnString()),
                  "DROP TABLE IF EXISTS sc_close; CREATE TABLE sc_close (a int, b int); "
                  "INSERT INTO sc_close VALUES (1, 2); SELECT 'ready'"),
            "ready");
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  max_prepared_statements: 100\n"));
  RawClient c;
  ASSERT_TRUE(c.Connect(fleet.port(), "postgres", "postgres")) << c.error();
  const std::string sql = "SELECT * FROM sc_close";
  ASSERT_TRUE(c.Send(RawClient::Parse("p", sql) + RawClient::Describe('S', "p") +
                     RawClient::Bind("p") + RawClient::Execute() + RawClient::Sync()));
  EXPECT_EQ(Types(c.ReadUntilReady()), "1tT2DCZ");
  ASSERT_EQ(Value(Connect(pg().ConnString()), "ALTER TABLE sc_close DROP COLUMN b; SELECT 'done'"),
            "done");
  ASSERT_TRUE(c.Send(RawClient::Bind("p") + RawClient::Execute() + RawClient::Sync()));
  auto failed = c.ReadUntilReady();
  ASSERT_EQ(Types(failed), "EZ");
  EXPECT_NE(failed[0].body.find("0A000"), std::string::npos);
  ASSERT_TRUE(c.Send(RawClient::Close('S', "p") + RawClient::Parse("p", sql) +
                     RawClient::Describe('S', "p") + RawClient::Bind("p") + RawClient::Execute() +
                     RawClient::Sync()));
  auto again = c.ReadUntilReady();
  ASSERT_EQ(Types(again), "31tT2DCZ");
  // One column now: RowDescription's count, then DataRow's.
  EXPECT_EQ(again[3].body.substr(0, 2), std::string("\0\1", 2));
  EXPECT_EQ(again[5].body.substr(0, 2), std::string("\0\1", 2));
}

// Randomized: clients prepare, describe, execute, deallocate and prepare again a few texts over
// two tables while DDL (through pgfleet, by any of them) adds, drops and retypes columns; every
// answer equals PostgreSQL's to the same steps directly. Fixed seeds, so a failure replays; the
// last with two workers.
TEST_F(SchemaChangeProtocolTest, RandomDdlInterleavedWithPreparedTrafficAnswersAsPostgres) {
  const std::vector<std::string> texts = {
      "SELECT * FROM sc_r1", "SELECT * FROM sc_r1 WHERE k = $1", "SELECT * FROM sc_r2",
      "INSERT INTO sc_r2 (k, v) VALUES ($1, $2)", "SELECT count(*) FROM sc_r2 WHERE v = $1"};
  const std::vector<std::string> ddl = {
      "ALTER TABLE sc_r1 ADD COLUMN extra int DEFAULT 7",
      "ALTER TABLE sc_r1 DROP COLUMN IF EXISTS extra",
      "ALTER TABLE sc_r1 ALTER COLUMN v TYPE text",
      "ALTER TABLE sc_r1 ALTER COLUMN v TYPE int USING length(v::text)",
      "ALTER TABLE sc_r2 ALTER COLUMN v TYPE bigint",
      "ALTER TABLE sc_r2 ALTER COLUMN v TYPE int",
      "ALTER TABLE sc_r2 ADD COLUMN note text DEFAULT 'n'",
      "ALTER TABLE sc_r2 DROP COLUMN IF EXISTS note"};
  const std::string setup =
      "DROP TABLE IF EXISTS sc_r1, sc_r2; CREATE TABLE sc_r1 (k int, v int); "
      "INSERT INTO sc_r1 VALUES (1, 10), (2, 20); CREATE TABLE sc_r2 (k int, v int); "
      "INSERT INTO sc_r2 VALUES (1, 5)";
  constexpr int kClients = 3;
  constexpr int kSteps = 120;
  auto run = [&](const std::string& conninfo, uint32_t seed, std::vector<std::string>* log) {
    std::mt19937 random(seed);
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<std::vector<bool>> held(kClients, std::vector<bool>(texts.size(), false));
    for (int i = 0; i < kClients; ++i) clients.push_back(std::make_unique<Client>(conninfo, log));
    for (int step = 0; step < kSteps; ++step) {
      const int who = static_cast<int>(random() % kClients);
      const size_t text = random() % texts.size();
      const std::string name = absl::StrCat("r", text);
      Client& client = *clients[who];
      switch (random() % 6) {
        case 0:
          client.Run(ddl[random() % ddl.size()]);
          break;
        case 1:
          if (held[who][text]) client.Deallocate(name);
          held[who][text] = false;
          [[fallthrough]];
        case 2:
          if (!held[who][text]) {
            client.Prepare(name, texts[text]);
            held[who][text] = true;
          }
          client.Describe(name);
          break;
        default:
          if (!held[who][text]) break;
          client.Execute(name, std::vector<std::string>(
                                   std::count(texts[text].begin(), texts[text].end(), '$'), "1"));
          break;
      }
    }
  };
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::vector<std::string> expected;
    ASSERT_EQ(Value(Connect(pg().ConnString()), setup + "; SELECT 'ready'"), "ready");
    run(pg().ConnString(), seed, &expected);
    // Two workers share the pod's one server: it moves between them with its statements.
    const int workers = seed == 3 ? 2 : 1;
    PgfleetProcess fleet(absl::StrCat(
        "workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
        "}\npool:\n  pool_mode: transaction\n  default_pool_size: 1\n"
        "  max_prepared_statements: 100\n"));
    ASSERT_EQ(WaitFor([&] { return WorkerPids(fleet.pid()).size(); },
                      [&](size_t n) { return n >= static_cast<size_t>(workers); }),
              static_cast<size_t>(workers));
    std::vector<std::string> through;
    ASSERT_EQ(Value(Connect(pg().ConnString()), setup + "; SELECT 'ready'"), "ready");
    run(fleet.ConnString(), seed, &through);
    ASSERT_EQ(through.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(through[i], expected[i]) << "step " << i << "\n" << fleet.Log().substr(0, 3000);
    }
  }
}

}  // namespace
}  // namespace pgfleet::testing
