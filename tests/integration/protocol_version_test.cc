// Startup packets as libpq 15 cannot send them (raw): protocol versions toward clients
// (negotiation as PostgreSQL 18 answers it, protocol 3.2's 32-byte cancel keys through any
// worker, the refusal of another major) and startup parameters that must survive server sharing.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "pooler/metrics/names.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/raw_client.h"

namespace pgfleet::testing {
namespace {

constexpr uint32_t kProtocol30 = 3u << 16;
constexpr uint32_t kProtocol32 = (3u << 16) | 2;

std::string Int32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

class ProtocolVersionTest : public IntegrationTest {
 protected:
  // The query `sql` runs in PostgreSQL now.
  bool Running(const std::string& sql) {
    return pg().QueryValue(absl::StrCat(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = '", sql,
               "'")) == "1";
  }
};

TEST_F(ProtocolVersionTest, ANewerMinorIsNegotiatedDownToThreeTwoWithItsOptionsListed) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  // libpq 19's default "grease": 3.9999 and an option nobody knows.
  RawClient client;
  ASSERT_TRUE(client.Connect(fleet.port(), "postgres", "postgres", (3u << 16) | 9999,
                             {{"_pq_.test_protocol_negotiation", ""}}))
      << client.error();
  ASSERT_FALSE(client.login_messages().empty());
  const RawMessage& first = client.login_messages().front();
  EXPECT_EQ(first.type, 'v');
  EXPECT_EQ(first.body, Int32(kProtocol32) + Int32(1) +
                            std::string("_pq_.test_protocol_negotiation") + std::string(1, '\0'));
  // The session speaks 3.2: a 32-byte key, as PostgreSQL 18 gives.
  EXPECT_EQ(client.backend_secret().size(), 32u);
  ASSERT_TRUE(client.Send(RawClient::Query("SELECT 1")));
  EXPECT_EQ(Types(client.ReadUntilReady()), "TDCZ");
}

TEST_F(ProtocolVersionTest, ThreeZeroGetsNoNegotiationAndAFourByteKeyUnlessItSendsOptions) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  RawClient plain;
  ASSERT_TRUE(plain.Connect(fleet.port(), "postgres", "postgres", kProtocol30)) << plain.error();
  for (const auto& m : plain.login_messages()) EXPECT_NE(m.type, 'v');
  EXPECT_EQ(plain.backend_secret().size(), 4u);
  RawClient with_option;
  ASSERT_TRUE(
      with_option.Connect(fleet.port(), "postgres", "postgres", kProtocol30, {{"_pq_.x", "1"}}))
      << with_option.error();
  EXPECT_EQ(with_option.login_messages().front().type, 'v');
  EXPECT_EQ(with_option.login_messages().front().body,
            Int32(kProtocol30) + Int32(1) + std::string("_pq_.x") + std::string(1, '\0'));
}

TEST_F(ProtocolVersionTest, AnotherMajorIsRefusedAsPostgreSQLRefusesIt) {
  PgfleetProcess fleet(PoolConfig("transaction", 2));
  RawClient client;
  ASSERT_FALSE(client.Connect(fleet.port(), "postgres", "postgres", 4u << 16));
  EXPECT_TRUE(absl::StrContains(client.error(), "C0A000")) << client.error();
  EXPECT_TRUE(absl::StrContains(client.error(),
                                "unsupported frontend protocol 4.0: server supports 3.0 to 3.2"))
      << client.error();
}

TEST_F(ProtocolVersionTest, AThreeTwoKeyCancelsThroughAnyWorkerAndNoOtherKeyDoes) {
  PgfleetProcess fleet(
      absl::StrReplaceAll(PoolConfig("transaction", 4), {{"workers: 1\n", "workers: 4\n"}}));
  // Every worker accepting: a client the kernel gives to a missing one waits in its backlog.
  ASSERT_TRUE(WaitFor([&] {
    const std::string log = fleet.Log();
    size_t ready = 0;
    for (size_t at = log.find("event=worker_ready"); at != std::string::npos;
         at = log.find("event=worker_ready", at + 1)) {
      ++ready;
    }
    return ready >= 4;
  }));
  const std::string sql = "SELECT pg_sleep(10)";
  // Until a CancelRequest reached another worker than the session's (the kernel picks one of
  // four) and was forwarded with its whole key: each session must be cancelled, at most 12.
  int sessions = 0;
  while (sessions < 12 &&
         (sessions < 2 || MetricSum(fleet, std::string(metrics::names::kCancelForwarded)) <= 0)) {
    ++sessions;
    RawClient client;
    ASSERT_TRUE(client.Connect(fleet.port(), "postgres", "postgres", kProtocol32))
        << client.error();
    ASSERT_EQ(client.backend_secret().size(), 32u);
    ASSERT_TRUE(client.Send(RawClient::Query(sql)));
    ASSERT_TRUE(WaitFor([&] { return Running(sql); }));
    // The key with one bit changed, and its first four bytes (a 3.0-length key), cancel nothing.
    std::string wrong = client.backend_secret();
    wrong.back() = static_cast<char>(wrong.back() ^ 1);
    ASSERT_TRUE(RawClient::SendCancel(fleet.port(), client.backend_pid(), wrong));
    ASSERT_TRUE(RawClient::SendCancel(fleet.port(), client.backend_pid(), wrong.substr(0, 4)));
    const auto still = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < still) {
      ASSERT_TRUE(Running(sql)) << "a wrong key cancelled the query";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_TRUE(RawClient::SendCancel(fleet.port(), client.backend_pid(), client.backend_secret()));
    const auto answer = client.ReadUntilReady();
    // RowDescription may come first: PostgreSQL describes the row before pg_sleep is cancelled.
    const std::string types = Types(answer);
    ASSERT_TRUE(types == "EZ" || types == "TEZ") << types;
    EXPECT_TRUE(absl::StrContains(answer[types.size() - 2].body, "C57014"))
        << answer[types.size() - 2].body;
    EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(1));
  }
  EXPECT_GT(MetricSum(fleet, std::string(metrics::names::kCancelForwarded)), 0)
      << "no cancel went through another worker in " << sessions << " sessions";
}

// The first column of the first DataRow in `messages` (empty when there is none).
std::string FirstValue(const std::vector<RawMessage>& messages) {
  for (const auto& m : messages) {
    if (m.type != 'D' || m.body.size() < 6) continue;
    const uint32_t length = (static_cast<uint32_t>(static_cast<uint8_t>(m.body[2])) << 24) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(m.body[3])) << 16) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(m.body[4])) << 8) |
                            static_cast<uint8_t>(m.body[5]);
    return m.body.substr(6, length);
  }
  return "";
}

// A tracked list parameter set at startup is re-applied exactly, quotes, commas and $user and
// all, whenever the client gets the server back from another client (set_config, not SET, which
// would make the whole list one schema name).
TEST_F(ProtocolVersionTest, ATrackedListParameterSurvivesSharingTheServer) {
  PgfleetProcess fleet(PoolConfig("transaction", 1, "  track_extra_parameters: [search_path]\n"));
  const std::string odd = "\"$user\", public, \"we,ird\", \"it's\"";
  RawClient a, b;
  ASSERT_TRUE(a.Connect(fleet.port(), "postgres", "postgres", kProtocol30, {{"search_path", odd}}))
      << a.error();
  ASSERT_TRUE(
      b.Connect(fleet.port(), "postgres", "postgres", kProtocol30, {{"search_path", "public"}}))
      << b.error();
  // PostgreSQL 15-17 do not report search_path: a client's SET of it cannot be followed, and
  // the log says so.
  if (pg().QueryValue("SHOW server_version_num") < "180000") {
    EXPECT_TRUE(WaitFor([&] {
      return fleet.Log().find("event=tracked_parameter_not_reported") != std::string::npos;
    })) << fleet.Log();
  }
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(a.Send(RawClient::Query("SHOW search_path")));
    EXPECT_EQ(FirstValue(a.ReadUntilReady()), odd);
    ASSERT_TRUE(b.Send(RawClient::Query("SHOW search_path")));
    EXPECT_EQ(FirstValue(b.ReadUntilReady()), "public");
  }
}

}  // namespace
}  // namespace pgfleet::testing
