// Tests for pooler/auth/hba.h: parsing of the pg_hba.conf subset and first-match semantics.
#include "pooler/auth/hba.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pgfleet::auth {
namespace {

::testing::AssertionResult MessageHas(const absl::Status& status, const std::string& part) {
  if (absl::StrContains(status.message(), part)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status << " lacks \"" << part << "\"";
}

HbaClient Tcp(std::string_view ip, std::string_view db, std::string_view user) {
  HbaClient client;
  client.address = ParseIpAddress(ip);
  client.database = db;
  client.user = user;
  return client;
}

HbaClient Local(std::string_view db, std::string_view user) {
  HbaClient client;
  client.local = true;
  client.database = db;
  client.user = user;
  return client;
}

// The method of the first matching rule, or "none".
std::string MethodFor(const HbaRules& rules, const HbaClient& client) {
  const HbaRule* rule = rules.Match(client);
  return rule == nullptr ? "none" : std::string(HbaMethodName(rule->method));
}

HbaRules MustParse(std::string_view text) {
  auto rules = ParseHba(text, "pg_hba.conf");
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *std::move(rules) : HbaRules();
}

TEST(ParseHbaTest, ParsesEveryConnectionTypeWithCommentsAndBlankLines) {
  HbaRules rules = MustParse(
      "# TYPE  DATABASE USER ADDRESS METHOD\n"
      "\n"
      "local   all      all              trust   # unix socket\n"
      "host    app      app  10.0.0.0/8  scram-sha-256\n"
      "hostssl all      all  ::1/128     md5\n"
      "hostnossl all    all  0.0.0.0/0   reject\n"
      "hostgssenc all   all  all         reject\n"
      "hostnogssenc all all  all         reject\n");
  ASSERT_EQ(rules.rules().size(), 6u);
  EXPECT_EQ(rules.rules()[0].type, HbaConnectionType::kLocal);
  EXPECT_EQ(rules.rules()[0].line, 3);
  EXPECT_EQ(rules.rules()[1].method, HbaMethod::kScramSha256);
  EXPECT_EQ(rules.rules()[1].databases, std::vector<std::string>{"app"});
  EXPECT_EQ(rules.rules()[2].type, HbaConnectionType::kHostSsl);
  EXPECT_TRUE(rules.rules()[2].mask.v6);
  EXPECT_EQ(rules.rules()[3].type, HbaConnectionType::kHostNoSsl);
  EXPECT_EQ(rules.rules()[4].type, HbaConnectionType::kHostGssEnc);
  EXPECT_EQ(rules.rules()[5].type, HbaConnectionType::kHostNoGssEnc);
}

TEST(ParseHbaTest, EmptyFileHasNoRulesAndRefusesEveryone) {
  HbaRules rules = MustParse("# nothing here\n\n");
  EXPECT_TRUE(rules.rules().empty());
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "db", "u")), "none");
}

TEST(HbaMatchTest, FirstMatchingRuleWins) {
  HbaRules rules = MustParse(
      "host all alice 127.0.0.1/32 reject\n"
      "host all all   127.0.0.1/32 trust\n");
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "db", "alice")), "reject");
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "db", "bob")), "trust");
}

TEST(HbaMatchTest, DatabaseAndUserListsAndKeywords) {
  HbaRules rules = MustParse(
      "host app,\"all\", reports  alice, bob  all  md5\n"
      "host sameuser              all         all  trust\n"
      "host replication           all         all  scram-sha-256\n");
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "app", "alice")), "md5");
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "reports", "bob")), "md5");
  // "all" in quotes is a database named all, not the keyword.
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "all", "bob")), "md5");
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "other", "alice")), "none");
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "carol", "carol")), "trust");
  // replication matches no pooled connection.
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.2.3", "replication", "dave")), "none");
}

TEST(HbaMatchTest, NamesAreCaseSensitive) {
  HbaRules rules = MustParse("host App Alice all trust\n");
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.0.1", "App", "Alice")), "trust");
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.0.1", "app", "alice")), "none");
}

TEST(HbaMatchTest, Ipv4CidrAndSeparateMask) {
  HbaRules rules = MustParse(
      "host all all 10.1.0.0/16 md5\n"
      "host all all 192.168.7.1 255.255.255.0 trust\n"
      "host all all 172.16.5.5/0 reject\n");
  EXPECT_EQ(MethodFor(rules, Tcp("10.1.200.3", "d", "u")), "md5");
  EXPECT_EQ(MethodFor(rules, Tcp("192.168.7.99", "d", "u")), "trust");
  EXPECT_EQ(MethodFor(rules, Tcp("8.8.8.8", "d", "u")), "reject");  // /0 = any IPv4
  EXPECT_EQ(MethodFor(rules, Tcp("::1", "d", "u")), "none");        // but no IPv6
}

TEST(HbaMatchTest, Ipv6Cidr) {
  HbaRules rules = MustParse(
      "host all all ::1/128 trust\n"
      "host all all fd00:1::/32 md5\n");
  EXPECT_EQ(MethodFor(rules, Tcp("::1", "d", "u")), "trust");
  EXPECT_EQ(MethodFor(rules, Tcp("fd00:1:ffff::7", "d", "u")), "md5");
  EXPECT_EQ(MethodFor(rules, Tcp("fd00:2::7", "d", "u")), "none");
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "d", "u")), "none");
}

TEST(HbaMatchTest, LocalRulesMatchOnlyUnixSocketsAndHostRulesOnlyTcp) {
  HbaRules rules = MustParse(
      "local all all trust\n"
      "host  all all all reject\n");
  EXPECT_EQ(MethodFor(rules, Local("d", "u")), "trust");
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "d", "u")), "reject");
}

TEST(HbaMatchTest, HostSslNeedsTlsAndHostNoSslRefusesIt) {
  HbaRules rules = MustParse(
      "hostssl   all all all trust\n"
      "hostnossl all all all md5\n");
  HbaClient plain = Tcp("127.0.0.1", "d", "u");
  EXPECT_EQ(MethodFor(rules, plain), "md5");
  HbaClient tls = plain;
  tls.tls = true;
  EXPECT_EQ(MethodFor(rules, tls), "trust");
}

TEST(HbaMatchTest, SameHostAndSameNetUseInterfaceAddresses) {
  HbaRules rules = MustParse(
      "host all all samehost trust\n"
      "host all all samenet  md5\n");
  // Without interfaces neither keyword matches anything.
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.0.5", "d", "u")), "none");
  rules.set_interfaces({{*ParseIpAddress("10.0.0.5"), *ParseIpAddress("255.255.255.0")}});
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.0.5", "d", "u")), "trust");
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.0.77", "d", "u")), "md5");
  EXPECT_EQ(MethodFor(rules, Tcp("10.0.1.77", "d", "u")), "none");
}

TEST(HbaMatchTest, SystemInterfacesIncludeLoopback) {
  HbaRules rules = MustParse("host all all samehost trust\n");
  rules.set_interfaces(SystemInterfaceAddresses());
  EXPECT_EQ(MethodFor(rules, Tcp("127.0.0.1", "d", "u")), "trust");
}

TEST(ParsePeerAddressTest, ReadsWhatTheListenerWrites) {
  HbaClient client;
  ASSERT_TRUE(ParsePeerAddress("127.0.0.1:5432", &client));
  EXPECT_FALSE(client.local);
  EXPECT_EQ(client.address, ParseIpAddress("127.0.0.1"));
  ASSERT_TRUE(ParsePeerAddress("[::1]:40000", &client));
  EXPECT_EQ(client.address, ParseIpAddress("::1"));
  ASSERT_TRUE(ParsePeerAddress("unix", &client));
  EXPECT_TRUE(client.local);
  EXPECT_FALSE(client.address.has_value());
  EXPECT_FALSE(ParsePeerAddress("garbage", &client));
  EXPECT_FALSE(ParsePeerAddress("[::1", &client));
}

TEST(ParsePeerAddressTest, FoldsIpv4MappedIpv6ToIpv4) {
  HbaRules rules = MustParse("host all all 10.0.0.0/8 trust\n");
  HbaClient client;
  client.database = "d";
  client.user = "u";
  ASSERT_TRUE(ParsePeerAddress("[::ffff:10.2.3.4]:5000", &client));
  EXPECT_FALSE(client.address->v6);
  EXPECT_EQ(MethodFor(rules, client), "trust");
}

TEST(ParseHbaTest, QuotedItemsKeepBlanksCommasAndHashes) {
  HbaRules rules = MustParse("host \"my db\",\"a,b\" \"x#y\" all trust\n");
  ASSERT_EQ(rules.rules().size(), 1u);
  EXPECT_EQ(rules.rules()[0].databases, (std::vector<std::string>{"my db", "a,b"}));
  EXPECT_EQ(rules.rules()[0].users, std::vector<std::string>{"x#y"});
}

TEST(ParseHbaTest, BackslashContinuesALine) {
  HbaRules rules = MustParse(
      "host all \\\n"
      "     all 127.0.0.1/32 \\\n"
      "     trust\n"
      "local all all reject\n");
  ASSERT_EQ(rules.rules().size(), 2u);
  EXPECT_EQ(rules.rules()[0].line, 1);
  EXPECT_EQ(rules.rules()[0].method, HbaMethod::kTrust);
  EXPECT_EQ(rules.rules()[1].line, 4);
}

TEST(ParseHbaTest, CrLfLineEndings) {
  HbaRules rules = MustParse("local all all trust\r\nhost all all all md5\r\n");
  ASSERT_EQ(rules.rules().size(), 2u);
}

TEST(ParseHbaTest, HostBitsOfTheNetworkAreMaskedAway) {
  HbaRules rules = MustParse("host all all 10.1.2.3/8 trust\n");
  EXPECT_EQ(rules.rules()[0].address, ParseIpAddress("10.0.0.0"));
}

struct BadLine {
  std::string text;
  std::string message;
};

class ParseHbaErrorTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(ParseHbaErrorTest, ReportsFileLineAndReason) {
  const BadLine& bad = GetParam();
  auto rules = ParseHba("# first line\n" + bad.text + "\n", "/etc/pgfleet/hba.conf");
  ASSERT_FALSE(rules.ok()) << bad.text;
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(rules.status(), "/etc/pgfleet/hba.conf:2: "));
  EXPECT_TRUE(MessageHas(rules.status(), bad.message));
}

INSTANTIATE_TEST_SUITE_P(
    BadLines, ParseHbaErrorTest,
    ::testing::Values(BadLine{"hosts all all all trust", "invalid connection type"},
                      BadLine{"host all all trust", "expected: host DATABASE USER ADDRESS METHOD"},
                      BadLine{"local all trust", "expected: local DATABASE USER METHOD"},
                      BadLine{"host all all 10.0.0.1 255.0.0.0", "missing authentication method"},
                      BadLine{"host all all 127.0.0.1/33 trust", "invalid CIDR mask"},
                      BadLine{"host all all ::1/129 trust", "invalid CIDR mask"},
                      BadLine{"host all all 127.0.0.1/ trust", "invalid CIDR mask"},
                      BadLine{"host all all 127.0.0.1/8x trust", "invalid CIDR mask"},
                      BadLine{"host all all db.example.com trust", "host names are not supported"},
                      BadLine{"host all all 10.0.0.1 trust", "invalid IP mask"},
                      BadLine{"host all all 10.0.0.1 ffff:: trust", "do not match in family"},
                      BadLine{"local all all ident", "method \"ident\" is not supported"},
                      BadLine{"host all all all peer",
                              "peer authentication is only supported on "
                              "local sockets"},
                      BadLine{"host all all all cert",
                              "cert authentication is only supported on "
                              "hostssl connections"},
                      BadLine{"host all all all magic", "invalid authentication method \"magic\""},
                      BadLine{"host all all all md5 clientcert=verify-ca",
                              "options are not supported"},
                      BadLine{"host samerole all all trust", "\"samerole\" is not supported"},
                      BadLine{"host @dbs all all trust", "@file inclusion"},
                      BadLine{"host all +admins all trust", "+group"},
                      BadLine{"host all /^a all trust", "regular expressions"},
                      BadLine{"host \"all trust", "unterminated quoted string"},
                      BadLine{"host a,,b all all trust", "empty element"},
                      BadLine{"host a, all all trust,", "list ends with a comma"},
                      BadLine{"host \"\" all all trust", "empty database name"},
                      BadLine{"include other.conf", "include directives are not supported"},
                      BadLine{"host all all 127.0.0.1/32,10.0.0.0/8 trust", "single address"}));

TEST(ParseHbaTest, CertOnHostsslAndPeerOnLocal) {
  HbaRules rules = MustParse("local all all peer\nhostssl all all all cert\n");
  ASSERT_EQ(rules.rules().size(), 2u);
  EXPECT_EQ(rules.rules()[0].method, HbaMethod::kPeer);
  EXPECT_EQ(rules.rules()[1].method, HbaMethod::kCert);
  EXPECT_EQ(HbaMethodName(HbaMethod::kPeer), "peer");
}

// `password` is the clear-text method (PgBouncer's plain), as in PostgreSQL.
TEST(ParseHbaTest, PasswordIsTheClearTextMethod) {
  HbaRules rules = MustParse("host all all all password\n");
  ASSERT_EQ(rules.rules().size(), 1u);
  EXPECT_EQ(rules.rules()[0].method, HbaMethod::kPassword);
  EXPECT_EQ(HbaMethodName(HbaMethod::kPassword), "password");
}

TEST(ParseHbaTest, ReportsEveryBadLine) {
  auto rules = ParseHba("host\nlocal all all trust\nbogus all all trust\n", "f");
  ASSERT_FALSE(rules.ok());
  EXPECT_TRUE(MessageHas(rules.status(), "f:1: "));
  EXPECT_TRUE(MessageHas(rules.status(), "\nf:3: "));
  EXPECT_FALSE(MessageHas(rules.status(), "f:2: "));
}

TEST(HbaRefusalMessageTest, MatchesPostgresWording) {
  HbaClient client = Tcp("10.1.2.3", "app", "alice");
  EXPECT_EQ(HbaRefusalMessage(client, nullptr),
            "no pg_hba.conf entry for host \"10.1.2.3\", user \"alice\", database \"app\", no "
            "encryption");
  HbaRules rules = MustParse("host all all all reject\n");
  EXPECT_EQ(HbaRefusalMessage(client, rules.Match(client)),
            "pg_hba.conf rejects connection for host \"10.1.2.3\", user \"alice\", database "
            "\"app\", no encryption");
  EXPECT_EQ(HbaRefusalMessage(Local("d", "u"), nullptr),
            "no pg_hba.conf entry for host \"[local]\", user \"u\", database \"d\", no encryption");
}

TEST(LoadHbaFileTest, ReadsAFileAndReportsMissingOnes) {
  char path[] = "/tmp/hba_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "host all all 127.0.0.1/32 trust\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  auto rules = LoadHbaFile(path);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->rules().size(), 1u);
  unlink(path);
  auto missing = LoadHbaFile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(missing.status(), path));
}

}  // namespace
}  // namespace pgfleet::auth
