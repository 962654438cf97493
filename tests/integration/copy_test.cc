// COPY FROM STDIN and COPY TO STDOUT of 100 MB streaming through pgfleet.
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/raw_client.h"

namespace pgfleet::testing {
namespace {

class CopyTest : public IntegrationTest {};

// A frontend message: type, big-endian length, body.
std::string Message(char type, const std::string& body) {
  const uint32_t length = static_cast<uint32_t>(body.size() + 4);
  std::string out(1, type);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(length >> shift));
  return out + body;
}

TEST_F(CopyTest, CopyInAndOutOf100Megabytes) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(c));
  ASSERT_TRUE(ResultOk(Exec(c,
                            "DROP TABLE IF EXISTS copy_big; CREATE TABLE copy_big (id bigint,"
                            " payload text)")));
  ResultPtr start = Exec(c, "COPY copy_big FROM STDIN");
  ASSERT_EQ(PQresultStatus(start.get()), PGRES_COPY_IN) << ErrorOf(c);
  const std::string payload(1000, 'x');
  constexpr int kRows = 100 * 1000;  // ~100 MB
  std::string chunk;
  size_t bytes_in = 0;
  for (int i = 0; i < kRows; ++i) {
    chunk += std::to_string(i) + "\t" + payload + "\n";
    if (chunk.size() > 256 * 1024 || i == kRows - 1) {
      ASSERT_EQ(PQputCopyData(c.get(), chunk.data(), static_cast<int>(chunk.size())), 1);
      bytes_in += chunk.size();
      chunk.clear();
    }
  }
  ASSERT_EQ(PQputCopyEnd(c.get(), nullptr), 1);
  ResultPtr done(PQgetResult(c.get()));
  ASSERT_EQ(PQresultStatus(done.get()), PGRES_COMMAND_OK) << ErrorOf(c);
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_GE(bytes_in, 100u * 1000 * 1000);
  EXPECT_EQ(Value(c, "SELECT count(*) FROM copy_big"), std::to_string(kRows));

  ResultPtr out = Exec(c, "COPY copy_big TO STDOUT");
  ASSERT_EQ(PQresultStatus(out.get()), PGRES_COPY_OUT);
  size_t bytes_out = 0;
  int rows_out = 0;
  while (true) {
    char* buf = nullptr;
    int n = PQgetCopyData(c.get(), &buf, 0);
    if (n < 0) break;
    bytes_out += static_cast<size_t>(n);
    ++rows_out;
    PQfreemem(buf);
  }
  ResultPtr out_done(PQgetResult(c.get()));
  EXPECT_EQ(PQresultStatus(out_done.get()), PGRES_COMMAND_OK);
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  EXPECT_EQ(rows_out, kRows);
  EXPECT_EQ(bytes_out, bytes_in);
  ASSERT_TRUE(ResultOk(Exec(c, "DROP TABLE copy_big")));
}

TEST_F(CopyTest, FailedCopyInKeepsServerUntilClientEndsTheStream) {
  PgfleetProcess fleet(PoolConfig("transaction", 1));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(
      ResultOk(Exec(c, "DROP TABLE IF EXISTS copy_small; CREATE TABLE copy_small (id int)")));
  ResultPtr start = Exec(c, "COPY copy_small FROM STDIN");
  ASSERT_EQ(PQresultStatus(start.get()), PGRES_COPY_IN);
  std::string bad = "not_a_number\n";
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(PQputCopyData(c.get(), bad.data(), static_cast<int>(bad.size())), 1);
  }
  ASSERT_EQ(PQputCopyEnd(c.get(), nullptr), 1);
  ResultPtr done(PQgetResult(c.get()));
  EXPECT_EQ(PQresultStatus(done.get()), PGRES_FATAL_ERROR);
  while (PGresult* extra = PQgetResult(c.get())) PQclear(extra);
  // Another client on the same single server sees clean protocol state.
  auto d = Connect(fleet.ConnString());
  EXPECT_EQ(Value(d, "SELECT 'clean'"), "clean");
  EXPECT_EQ(Value(c, "SELECT 'clean too'"), "clean too");
}

TEST_F(CopyTest, ServerThatEndedAFailedCopyInFirstIsFreedByTheClientsCopyDone) {
  // One server; a client waiting for it gives up after 3 s.
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  query_wait_timeout: 3s\n"));
  auto c = Connect(fleet.ConnString());
  ASSERT_TRUE(
      ResultOk(Exec(c, "DROP TABLE IF EXISTS copy_small; CREATE TABLE copy_small (id int)")));
  RawClient raw;
  ASSERT_TRUE(raw.Connect(fleet.port(), "postgres", "postgres")) << raw.error();
  // PostgreSQL fails the COPY at its first row and answers ErrorResponse and ReadyForQuery while
  // the client is still in copy-in mode: the server stays with the client until its CopyDone.
  ASSERT_TRUE(raw.Send(Message('Q', std::string("COPY copy_small FROM STDIN") + '\0') +
                       Message('d', "not_a_number\n")));
  EXPECT_EQ(Types(raw.ReadUntilReady(1)), "GEZ");
  ASSERT_TRUE(raw.Send(Message('c', "")));
  // The CopyDone frees it (there is nothing more to wait for from PostgreSQL, which drops it).
  EXPECT_EQ(Value(c, "SELECT 'clean'"), "clean");
  ASSERT_TRUE(raw.Send(Message('Q', std::string("SELECT 'clean too'") + '\0')));
  EXPECT_EQ(Types(raw.ReadUntilReady(1)), "TDCZ");
}

}  // namespace
}  // namespace pgfleet::testing
