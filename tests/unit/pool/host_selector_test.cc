// HostSelector: libpq's host list, target_session_attrs and load_balance_hosts, with made-up times.
#include "pooler/pool/host_selector.h"

#include <random>
#include <set>

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace {

using config::TargetSessionAttrs;

class StepRandom final : public base::RandomSource {
 public:
  void Fill(std::span<uint8_t> out) override {
    for (uint8_t& b : out) b = static_cast<uint8_t>(engine_());
  }

 private:
  std::mt19937 engine_{7};
};

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const HostFacts kPrimary{.in_hot_standby = false, .default_transaction_read_only = false};
const HostFacts kStandby{.in_hot_standby = true, .default_transaction_read_only = true};
const HostFacts kReadOnlyPrimary{.in_hot_standby = false, .default_transaction_read_only = true};

config::DatabaseConfig Db(TargetSessionAttrs attrs, size_t hosts = 2) {
  config::DatabaseConfig db;
  db.name = "app";
  db.hosts.clear();
  for (size_t i = 0; i < hosts; ++i) db.hosts.push_back("10.0.0." + std::to_string(i + 1));
  db.ports = {5432};
  db.target_session_attrs = attrs;
  return db;
}

TEST(HostSelectorTest, AddressesPairHostsWithOnePortOrOnePerHost) {
  config::DatabaseConfig db = Db(TargetSessionAttrs::kAny);
  EXPECT_EQ(db.Addresses(),
            (std::vector<config::HostAddress>{{"10.0.0.1", 5432}, {"10.0.0.2", 5432}}));
  db.ports = {5433, 5434};
  EXPECT_EQ(db.Addresses(),
            (std::vector<config::HostAddress>{{"10.0.0.1", 5433}, {"10.0.0.2", 5434}}));
}

TEST(HostSelectorTest, FactsComeFromTheLoginParameters) {
  auto facts = HostFacts::FromParams({{"server_version", "18.1"},
                                      {"in_hot_standby", "on"},
                                      {"default_transaction_read_only", "on"}});
  ASSERT_TRUE(facts.has_value());
  EXPECT_TRUE(facts->in_hot_standby);
  EXPECT_TRUE(facts->default_transaction_read_only);
  EXPECT_FALSE(HostFacts::FromParams({{"server_version", "13.0"}}).has_value());
}

TEST(HostSelectorTest, AnyTakesTheFirstHostThatAnswers) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kAny), random);
  EXPECT_EQ(hosts.Pick(kT0), 0u);
  EXPECT_TRUE(hosts.OnLogin(0, kStandby, kT0));
  EXPECT_EQ(hosts.Pick(kT0), 0u);
  // The first host refuses connections: the second is tried at once, the first after a back-off.
  hosts.OnConnectFailed(0, kT0, absl::Seconds(1), "connection refused");
  EXPECT_EQ(hosts.Pick(kT0), 1u);
  EXPECT_EQ(hosts.status(0).role, HostRole::kUnknown);
  EXPECT_EQ(hosts.Pick(kT0 + absl::Seconds(1)), 0u);
}

TEST(HostSelectorTest, ReadWriteSkipsAStandbyUntilItsRecheck) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kReadWrite), random);
  EXPECT_EQ(hosts.Pick(kT0), 0u);
  EXPECT_FALSE(hosts.OnLogin(0, kStandby, kT0)) << "a standby does not fit read-write";
  EXPECT_EQ(hosts.Pick(kT0), 1u);
  EXPECT_TRUE(hosts.OnLogin(1, kPrimary, kT0));
  EXPECT_EQ(hosts.Pick(kT0 + absl::Milliseconds(500)), 1u);
  EXPECT_TRUE(hosts.Serves(1, kT0));
  EXPECT_FALSE(hosts.Serves(0, kT0));
  // A read-only primary (default_transaction_read_only) does not fit either.
  EXPECT_FALSE(hosts.OnLogin(1, kReadOnlyPrimary, kT0));
}

TEST(HostSelectorTest, NoHostFitsUntilAStandbyIsPromoted) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kReadWrite), random);
  // The primary is gone and the standby is not promoted yet: nothing to try until the back-off
  // and the recheck are over, and then the standby is tried again.
  hosts.OnConnectFailed(0, kT0, absl::Seconds(1), "connection refused");
  EXPECT_EQ(hosts.Pick(kT0), 1u);
  EXPECT_FALSE(hosts.OnLogin(1, kStandby, kT0));
  EXPECT_FALSE(hosts.Pick(kT0).has_value());
  EXPECT_FALSE(hosts.AnyToTry(kT0));
  const absl::Time later = kT0 + HostSelector::kRoleRecheck;
  ASSERT_TRUE(hosts.AnyToTry(later));
  const auto host = hosts.Pick(later);
  ASSERT_TRUE(host.has_value());
  EXPECT_TRUE(hosts.OnLogin(1, kPrimary, later)) << "promoted";
}

TEST(HostSelectorTest, StandbyAndReadOnly) {
  StepRandom random;
  HostSelector standby(Db(TargetSessionAttrs::kStandby), random);
  EXPECT_FALSE(standby.OnLogin(0, kPrimary, kT0));
  EXPECT_EQ(standby.Pick(kT0), 1u);
  EXPECT_TRUE(standby.OnLogin(1, kStandby, kT0));
  HostSelector read_only(Db(TargetSessionAttrs::kReadOnly), random);
  EXPECT_TRUE(read_only.OnLogin(0, kReadOnlyPrimary, kT0));
  EXPECT_TRUE(read_only.OnLogin(1, kStandby, kT0));
  EXPECT_FALSE(read_only.OnLogin(0, kPrimary, kT0));
  HostSelector primary(Db(TargetSessionAttrs::kPrimary), random);
  EXPECT_TRUE(primary.OnLogin(0, kReadOnlyPrimary, kT0));
  EXPECT_FALSE(primary.OnLogin(1, kStandby, kT0));
}

TEST(HostSelectorTest, PreferStandbyTakesThePrimaryOnlyWhenNoStandbyCanServe) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kPreferStandby), random);
  EXPECT_EQ(hosts.Pick(kT0), 0u);
  // The first host is the primary while the second may be a standby: try the second.
  EXPECT_FALSE(hosts.OnLogin(0, kPrimary, kT0));
  EXPECT_EQ(hosts.Pick(kT0), 1u);
  EXPECT_TRUE(hosts.OnLogin(1, kStandby, kT0));
  EXPECT_EQ(hosts.Pick(kT0), 1u);
  // The standby goes away: the primary serves.
  hosts.OnConnectFailed(1, kT0, absl::Seconds(1), "connection refused");
  EXPECT_EQ(hosts.Pick(kT0), 0u);
  EXPECT_TRUE(hosts.OnLogin(0, kPrimary, kT0));
  // Promoted to primary under prefer-standby: still serves, nothing to retire.
  EXPECT_FALSE(hosts.OnHotStandbyReport(1, false, kT0));
}

TEST(HostSelectorTest, APromotionRetiresAStandbyEntrysServers) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kStandby), random);
  EXPECT_TRUE(hosts.OnLogin(1, kStandby, kT0));
  EXPECT_FALSE(hosts.OnHotStandbyReport(1, true, kT0)) << "no change";
  EXPECT_TRUE(hosts.OnHotStandbyReport(1, false, kT0)) << "promoted: no longer a standby";
  EXPECT_EQ(hosts.status(1).role, HostRole::kPrimary);
  EXPECT_FALSE(hosts.Serves(1, kT0));
}

TEST(HostSelectorTest, BackOffDoublesUpToTheCapAndOneOutageCountsOnce) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kAny, 1), random);
  hosts.OnConnectFailed(0, kT0, absl::Seconds(1), "refused");
  const absl::Time first = hosts.status(0).down_until;
  EXPECT_EQ(first, kT0 + absl::Milliseconds(100));
  // Servers failing together (the same outage) do not stretch the back-off.
  hosts.OnConnectFailed(0, kT0 + absl::Milliseconds(10), absl::Seconds(1), "refused");
  EXPECT_EQ(hosts.status(0).down_until, first);
  EXPECT_EQ(hosts.status(0).failures, 1);
  absl::Time now = first;
  for (int i = 0; i < 10; ++i) {
    hosts.OnConnectFailed(0, now, absl::Seconds(1), "refused");
    EXPECT_LE(hosts.status(0).down_until - now, absl::Seconds(1));
    now = hosts.status(0).down_until;
  }
  EXPECT_EQ(hosts.status(0).down_until - hosts.status(0).checked_at, absl::InfiniteDuration())
      << "never logged in";
  EXPECT_TRUE(hosts.OnLogin(0, kPrimary, now));
  EXPECT_EQ(hosts.status(0).failures, 0);
  EXPECT_EQ(hosts.Pick(now), 0u);
}

TEST(HostSelectorTest, RandomLoadBalancingUsesEveryHost) {
  StepRandom random;
  config::DatabaseConfig db = Db(TargetSessionAttrs::kAny, 3);
  db.load_balance_hosts = config::LoadBalanceHosts::kRandom;
  HostSelector hosts(db, random);
  std::set<size_t> picked;
  for (int i = 0; i < 100; ++i) picked.insert(*hosts.Pick(kT0));
  EXPECT_EQ(picked.size(), 3u);
  db.load_balance_hosts = config::LoadBalanceHosts::kDisable;
  hosts.Reconfigure(db);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(hosts.Pick(kT0), 0u);
}

TEST(HostSelectorTest, AReloadKeepsWhatIsKnownOfHostsThatStay) {
  StepRandom random;
  HostSelector hosts(Db(TargetSessionAttrs::kReadWrite), random);
  EXPECT_TRUE(hosts.OnLogin(1, kPrimary, kT0));
  config::DatabaseConfig db = Db(TargetSessionAttrs::kReadWrite, 3);
  std::swap(db.hosts[0], db.hosts[1]);  // 10.0.0.2 first now
  hosts.Reconfigure(db);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts.status(0).address.host, "10.0.0.2");
  EXPECT_EQ(hosts.status(0).role, HostRole::kPrimary);
  EXPECT_EQ(hosts.IndexOf({"10.0.0.3", 5432}), 2u);
  EXPECT_FALSE(hosts.IndexOf({"10.0.0.9", 5432}).has_value());
}

}  // namespace
}  // namespace pgfleet::pool
