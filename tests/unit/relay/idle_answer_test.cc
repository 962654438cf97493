// The one-look test before the idle answers (idle_answer.h): it never passes by a message that
// Relay::AnswerIdleDeallocate or ReadIdleListen would answer, and it passes by ordinary queries.
#include "pooler/relay/idle_answer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/listen/listen_hub.h"
#include "pooler/protocol/builders.h"
#include "pooler/relay/relay.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::pool {
namespace {

using protocol::StringSink;
using protocol::testing::AsBytes;
using protocol::testing::Build;

std::string Query(std::string_view sql) {
  return Build([&](StringSink& s) { protocol::BuildQuery(s, sql); });
}
// What psycopg 3 sends for a statement without parameters; `name` "" is the unnamed statement.
std::string Extended(std::string_view sql, std::string_view name = "") {
  return Build([&](StringSink& s) {
    protocol::BuildParse(s, name, sql, {});
    protocol::BuildBindText(s, "", name, {});
    protocol::BuildDescribe(s, 'P', "");
    protocol::BuildExecute(s, "", 0);
    protocol::BuildSync(s);
  });
}

// Whether pgfleet answers `bytes` itself, asked the long way, for a client that prepared "s1".
bool AnsweredIdle(const std::string& bytes) {
  ClientStream client(1u << 20, 0);
  client.statements["s1"] = nullptr;
  StringSink answer;
  if (Relay::AnswerIdleDeallocate(client, AsBytes(bytes), answer) > 0) return true;
  return ReadIdleListen(client, AsBytes(bytes), 1u << 20).kind != IdleListen::Kind::kNone;
}

TEST(MayAnswerIdleTest, NeverPassesByWhatTheIdleAnswersTake) {
  const std::vector<std::string> answered = {
      Query("DEALLOCATE s1"),   Query("deallocate prepare s1;"),
      Query("  DEALLOCATE s1"), Query("LISTEN jobs"),
      Query("listen jobs"),     Query("/* c */ UNLISTEN jobs"),
      Query("UNLISTEN *"),      Extended("DEALLOCATE s1"),
      Extended("LISTEN jobs"),  Extended("unlisten *"),
  };
  for (const std::string& bytes : answered) {
    ASSERT_TRUE(AnsweredIdle(bytes)) << bytes;  // the cases are what they claim to be
    EXPECT_TRUE(MayAnswerIdle(AsBytes(bytes))) << bytes;
    // Any prefix too: too few bytes to tell, or a first byte that still may be one.
    for (size_t n = 1; n < bytes.size(); ++n) {
      EXPECT_TRUE(MayAnswerIdle(AsBytes(std::string_view(bytes).substr(0, n)))) << n << bytes;
    }
  }
}

TEST(MayAnswerIdleTest, PassesByOrdinaryStatementsWithOneLook) {
  const std::vector<std::string> passed = {
      Query("SELECT abalance FROM pgbench_accounts WHERE aid = 1;"),
      Query("insert into t values (1)"),
      Query("BEGIN"),
      Extended("SELECT 1"),
      Extended("LISTEN jobs", "s2"),  // a named statement is never answered idle
      Build([](StringSink& s) {
        protocol::BuildBindText(s, "", "s1", {});
        protocol::BuildExecute(s, "", 0);
        protocol::BuildSync(s);
      }),
      Build([](StringSink& s) { protocol::BuildSync(s); }),
  };
  for (const std::string& bytes : passed) {
    EXPECT_FALSE(MayAnswerIdle(AsBytes(bytes))) << bytes;
    EXPECT_FALSE(AnsweredIdle(bytes)) << bytes;
  }
}

}  // namespace
}  // namespace pgfleet::pool
