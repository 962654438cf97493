// The relay's part in prepared statements after a schema change (docs/architecture.md, "Prepared
// statements after a schema change"): what starts a new schema epoch, and that a Parse in a new
// epoch reaches the server under a name of its own.
#include <string>

#include "gtest/gtest.h"
#include "pooler/relay/relay.h"
#include "tests/unit/relay/relay_test_link.h"

namespace pgfleet::pool::relay_testing {
namespace {

std::string StalePlanError() {
  return Build([](StringSink& s) {
    protocol::BuildErrorResponse(s, "ERROR", "0A000", "cached plan must not change result type");
  });
}

// One simple-query round trip: what the client sends, what the server answers.
void RoundTrip(Link& link, std::string_view sql, std::string_view tag, char status) {
  link.FromClient(Query(sql));
  link.FromServer(Complete(tag) + Ready(status));
}

TEST(RelaySchemaChangeTest, DdlStartsAnEpochWhenSentAndAgainWhenItCommits) {
  Link link(/*track_prepared=*/true, nullptr, SessionTracking::kTrack);
  RoundTrip(link, "BEGIN", "BEGIN", 'T');
  EXPECT_EQ(link.registry().epoch(), 0u);
  link.FromClient(Query("ALTER TABLE t DROP COLUMN b"));
  EXPECT_EQ(link.registry().epoch(), 1u) << "the client's own Parses see its DDL";
  link.FromServer(Complete("ALTER TABLE") + Ready('T'));
  EXPECT_EQ(link.registry().epoch(), 1u);
  RoundTrip(link, "COMMIT", "COMMIT", 'I');
  EXPECT_EQ(link.registry().epoch(), 2u) << "everyone's Parses see it once committed";
}

TEST(RelaySchemaChangeTest, RolledBackOrFailedDdlStartsAnEpochAtItsEndAllTheSame) {
  // A Parse after the DDL in its transaction was analysed against it: not to be shared after.
  Link link(/*track_prepared=*/true, nullptr, SessionTracking::kTrack);
  RoundTrip(link, "BEGIN", "BEGIN", 'T');
  RoundTrip(link, "CREATE TABLE t (a int)", "CREATE TABLE", 'T');
  EXPECT_EQ(link.registry().epoch(), 1u);
  RoundTrip(link, "ROLLBACK", "ROLLBACK", 'I');
  EXPECT_EQ(link.registry().epoch(), 2u);
  // In one Query with its ROLLBACK.
  link.FromClient(Query("BEGIN; ALTER TABLE t ADD c int; ROLLBACK"));
  EXPECT_EQ(link.registry().epoch(), 3u);
  link.FromServer(Complete("BEGIN") + Complete("ALTER TABLE") + Complete("ROLLBACK") + Ready('I'));
  EXPECT_EQ(link.registry().epoch(), 4u);
  // Failed in its implicit transaction.
  link.FromClient(Query("DROP TABLE missing"));
  link.FromServer(Error() + Ready('I'));
  EXPECT_EQ(link.registry().epoch(), 6u);
  RoundTrip(link, "SELECT 1", "SELECT 1", 'I');
  RoundTrip(link, "SET search_path = a", "SET", 'I');
  EXPECT_EQ(link.registry().epoch(), 6u) << "only DDL";
}

TEST(RelaySchemaChangeTest, AStalePlanErrorMakesTheNextParseOfTheTextReachTheServer) {
  Link link(/*track_prepared=*/true);
  const std::string sql = "SELECT * FROM t";
  EXPECT_NE(link.FromClient(Parse("s", sql) + Sync()).find(Renamed(sql)), std::string::npos);
  link.FromServer(ParseComplete() + Ready('I'));
  // Another name for the same text: answered from the server's statement, nothing sent.
  EXPECT_EQ(link.FromClient(Parse("t", sql) + Sync()), Sync());
  link.FromServer(Ready('I'));
  // The server says its statement is stale (DDL made around pgfleet); the client gets that.
  link.FromClient(Bind("s") + Execute() + Sync());
  EXPECT_EQ(link.FromServer(StalePlanError() + Ready('I')), StalePlanError() + Ready('I'));
  EXPECT_EQ(link.registry().epoch(), 1u);
  // A Parse from now on is analysed afresh, under the new epoch's name.
  const std::string sent = link.FromClient(Parse("u", sql) + Sync());
  EXPECT_NE(sent.find(Renamed(sql, 1)), std::string::npos) << "a real Parse";
  link.FromServer(ParseComplete() + Ready('I'));
  // The client's older names keep their statement, as PostgreSQL keeps a client's own.
  EXPECT_NE(link.FromClient(Bind("t") + Execute() + Sync()).find(Renamed(sql)), std::string::npos);
}

TEST(RelaySchemaChangeTest, AParseOfATextTheClientClosedReachesTheServer) {
  Link link(/*track_prepared=*/true);
  const std::string sql = "INSERT INTO t (v) VALUES (1)";
  link.FromClient(Parse("s", sql) + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  // pgx after an error: Close, then Parse the same text again.
  const std::string sent = link.FromClient(Close('S', "s") + Parse("s", sql) + Sync());
  EXPECT_NE(sent.find(Renamed(sql, 1)), std::string::npos) << "analysed afresh";
  EXPECT_EQ(link.registry().epoch(), 1u);
  link.FromServer(ParseComplete() + Ready('I'));
  // A Parse of a text it never closed is answered from the server's statement as before.
  link.FromClient(Parse("x", "SELECT 2") + Sync());
  link.FromServer(ParseComplete() + Ready('I'));
  EXPECT_EQ(link.FromClient(Parse("y", "SELECT 2") + Sync()), Sync());
  EXPECT_EQ(link.registry().epoch(), 1u);
}

}  // namespace
}  // namespace pgfleet::pool::relay_testing
