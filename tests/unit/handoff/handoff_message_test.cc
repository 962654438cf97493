// Tests for pooler/handoff/handoff_message.h: every kind round-trips (binary secrets, empty
// strings), statements give way when a server would not fit in one message, and malformed bytes
// (every truncation, trailing bytes, bad version/kind/flag, forged counts) are errors.
#include "pooler/handoff/handoff_message.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace {

HandoffMessage FullServer() {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kServer;
  m.from = 0xfedcba98;
  m.database = "app";
  m.user = "alice";
  ServerHandoff& s = m.server;
  s.backend_pid = 0x80000001;
  // Every byte value, NULs and high bytes included: the secret is opaque binary.
  s.backend_secret = {0x00, 0xff, 0x80, 0x7f, 0x00, 0x01, 0xfe, 0x00};
  s.created_at_us = -5;  // negative and large values keep all 64 bits
  s.last_used_at_us = int64_t{0x7fffffff12345678};
  s.login_params = {{"server_version", "16.2"}, {"client_encoding", "UTF8"}, {"empty", ""}};
  s.tracked_params = {{"TimeZone", "UTC"}, {"application_name", ""}};
  s.statements = {std::string("SELECT $1\0\1\0\0\0\x17", 15), "", "SELECT 1"};
  s.statements_complete = true;
  return m;
}

HandoffMessage RoundTrip(const HandoffMessage& m) {
  std::string bytes = EncodeHandoff(m);
  auto decoded = DecodeHandoff(bytes);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok()) return {};
  // Canonical: decoding and encoding again gives the same bytes.
  EXPECT_EQ(EncodeHandoff(*decoded), bytes);
  return *decoded;
}

TEST(HandoffMessageTest, RequestRoundTrips) {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kRequest;
  m.from = 3;
  m.database = "db";
  m.user = "u";
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, RoomRoundTripsWithEmptyStrings) {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kRoom;
  m.from = 0;
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, EvictRoundTripsWithEitherBudgetNamed) {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kEvict;
  m.from = 7;
  m.database = "db";  // the database's budget is full, not the user's
  EXPECT_EQ(RoundTrip(m), m);
  m.database.clear();
  m.user = "u";
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, ClientRoundTripsWithItsPeerAddress) {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kClient;
  m.from = 4;
  for (const char* peer : {"127.0.0.1:51234", "[::1]:6432", "unix", ""}) {
    m.peer_address = peer;
    EXPECT_EQ(RoundTrip(m), m);
  }
  // Only a client carries a peer address.
  m.kind = HandoffMessage::Kind::kRequest;
  m.peer_address = "127.0.0.1:1";
  EXPECT_EQ(RoundTrip(m).peer_address, "");
}

TEST(HandoffMessageTest, NonServerKindsCarryNoServer) {
  HandoffMessage m = FullServer();
  m.kind = HandoffMessage::Kind::kRequest;
  HandoffMessage decoded = RoundTrip(m);
  EXPECT_EQ(decoded.from, m.from);
  EXPECT_EQ(decoded.database, m.database);
  EXPECT_EQ(decoded.user, m.user);
  EXPECT_EQ(decoded.server, ServerHandoff{});
}

TEST(HandoffMessageTest, ServerRoundTrips) {
  HandoffMessage m = FullServer();
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, EmptyServerRoundTrips) {
  HandoffMessage m;
  m.kind = HandoffMessage::Kind::kServer;
  EXPECT_EQ(RoundTrip(m), m);
  m.server.statements_complete = false;
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, IncompleteStatementsRoundTrip) {
  HandoffMessage m = FullServer();
  m.server.statements_complete = false;
  EXPECT_EQ(RoundTrip(m), m);
}

TEST(HandoffMessageTest, StatementsThatDoNotFitAreDropped) {
  HandoffMessage m = FullServer();
  m.server.statements.assign(20, std::string(4000, 'q'));  // ~80 KB
  std::string bytes = EncodeHandoff(m);
  EXPECT_LE(bytes.size(), kMaxHandoffMessageBytes);
  auto decoded = DecodeHandoff(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  HandoffMessage expected = m;
  expected.server.statements.clear();
  expected.server.statements_complete = false;
  EXPECT_EQ(*decoded, expected);
}

TEST(HandoffMessageTest, StatementsThatJustFitAreKept) {
  HandoffMessage m = FullServer();
  m.server.statements.clear();
  size_t base = EncodeHandoff(m).size();
  // One statement that brings the message to exactly the limit (4 bytes of length prefix).
  m.server.statements.push_back(std::string(kMaxHandoffMessageBytes - base - 4, 'x'));
  std::string bytes = EncodeHandoff(m);
  EXPECT_EQ(bytes.size(), kMaxHandoffMessageBytes);
  EXPECT_EQ(RoundTrip(m), m);
  // One byte more and they give way.
  m.server.statements.back().push_back('x');
  auto decoded = DecodeHandoff(EncodeHandoff(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->server.statements.empty());
  EXPECT_FALSE(decoded->server.statements_complete);
}

TEST(HandoffMessageTest, EveryTruncationIsRejected) {
  std::vector<HandoffMessage> messages = {FullServer(), HandoffMessage{}, HandoffMessage{}};
  messages[1].kind = HandoffMessage::Kind::kRoom;
  messages[1].database = "d";
  messages[2].kind = HandoffMessage::Kind::kClient;
  messages[2].peer_address = "10.0.0.1:40000";
  for (const HandoffMessage& m : messages) {
    std::string bytes = EncodeHandoff(m);
    for (size_t len = 0; len < bytes.size(); ++len) {
      auto decoded = DecodeHandoff(std::string_view(bytes).substr(0, len));
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << "length " << len;
    }
  }
}

TEST(HandoffMessageTest, TrailingBytesAreRejected) {
  for (const std::string& garbage : {std::string(1, '\0'), std::string("xyz")}) {
    std::string bytes = EncodeHandoff(FullServer()) + garbage;
    EXPECT_EQ(DecodeHandoff(bytes).status().code(), absl::StatusCode::kInvalidArgument);
    HandoffMessage request;
    bytes = EncodeHandoff(request) + garbage;
    EXPECT_EQ(DecodeHandoff(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(HandoffMessageTest, BadVersionKindAndFlagAreRejected) {
  std::string good = EncodeHandoff(FullServer());
  ASSERT_TRUE(DecodeHandoff(good).ok());
  std::string bad = good;
  bad[0] = static_cast<char>(bad[0] + 1);
  EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
  for (char kind : {0, 4, 5, 6, -1}) {
    bad = good;
    bad[1] = kind;
    EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // statements_complete sits right before the statements' count, 5 bytes before the end for a
  // server without statements.
  HandoffMessage m = FullServer();
  m.server.statements.clear();
  bad = EncodeHandoff(m);
  ASSERT_EQ(bad[bad.size() - 5], 1);
  bad[bad.size() - 5] = 2;
  EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandoffMessageTest, ForgedCountsAndLengthsAreRejected) {
  HandoffMessage m = FullServer();
  m.server.statements.clear();
  std::string bytes = EncodeHandoff(m);
  // The statements' count is the last four bytes: claim 2^32-1 statements.
  std::string bad = bytes;
  bad.replace(bad.size() - 4, 4, "\xff\xff\xff\xff");
  EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // One statement claimed with nothing after the count.
  bad.replace(bad.size() - 4, 4, std::string("\0\0\0\1", 4));
  EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // The database's length (after version, kind, from) longer than the message.
  bad = bytes;
  bad.replace(6, 4, "\x7f\xff\xff\xff");
  EXPECT_EQ(DecodeHandoff(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandoffMessageTest, MoreThanOneMessageIsRejected) {
  HandoffMessage m;
  m.database.assign(kMaxHandoffMessageBytes, 'd');
  EXPECT_EQ(DecodeHandoff(EncodeHandoff(m)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandoffMessageTest, StatementEpochsRoundTripAndMustBeCanonical) {
  HandoffMessage m = FullServer();
  m.server.statement_epochs = {{0, 3}, {2, 1}};
  EXPECT_EQ(RoundTrip(m), m);
  for (auto bad : std::vector<std::vector<std::pair<uint32_t, uint64_t>>>{
           {{2, 1}, {0, 3}}, {{0, 0}}, {{3, 1}}, {{1, 1}, {1, 2}}}) {
    HandoffMessage wrong = FullServer();
    wrong.server.statement_epochs = bad;
    EXPECT_FALSE(DecodeHandoff(EncodeHandoff(wrong)).ok());
  }
}

}  // namespace
}  // namespace pgfleet::pool
