// The typed `peering:` and `controller:` sections: what the chart renders loads, mistakes name
// the file, the key and the line like every other section, unknown peering keys (older configs)
// are warnings, and the combinations peering needs are checked.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/config/config.h"

namespace pgfleet::config {
namespace fleet_sections_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kFile[] = "/etc/pgfleet/pgfleet.yaml";

absl::StatusOr<Config> Load(const std::string& sections) {
  return LoadConfigText(std::string("databases: {app: {}}\n") + sections, kFile);
}

std::string ErrorOf(const std::string& sections) {
  auto config = Load(sections);
  return config.ok() ? "(loaded)" : std::string(config.status().message());
}

TEST(FleetSectionsTest, EmptySectionsMeanNoPeeringPortAndNoController) {
  auto config = Load("peering: {}\ncontroller:\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->peering.listen.empty());
  EXPECT_TRUE(config->peering.forward_cancels);
  EXPECT_EQ(config->peering.discovery_interval, absl::Seconds(10));
  EXPECT_FALSE(config->controller.enabled());
  EXPECT_EQ(config->controller.lease_timeout, absl::Seconds(15));
  EXPECT_EQ(config->controller.min_share, 1);
}

TEST(FleetSectionsTest, WhatTheHelmChartRendersLoads) {
  auto config = Load(
      "peering:\n"
      "  listen: 0.0.0.0:9128\n"
      "  advertise_address_env: POD_IP\n"
      "  discovery_dns: pgfleet-peers.default.svc.cluster.local\n"
      "  token_file: /etc/pgfleet/peering-token\n"
      "  runtime_dir: /run/pgfleet\n"
      "controller:\n"
      "  address: pgfleet-controller.default.svc.cluster.local:9130\n"
      "  listen: 0.0.0.0:9130\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->warnings, IsEmpty());
  EXPECT_EQ(config->peering.token_file, "/etc/pgfleet/peering-token");
  EXPECT_EQ(config->peering.runtime_dir, "/run/pgfleet");
  EXPECT_EQ(config->peering.advertise_address_env, "POD_IP");
  EXPECT_TRUE(config->controller.enabled());
  EXPECT_EQ(config->controller.listen, "0.0.0.0:9130");
}

TEST(FleetSectionsTest, EveryKeyIsRead) {
  auto config = Load(
      "peering:\n"
      "  advertise_address: 10.1.2.3:9128\n"
      "  static_peers: [10.0.0.2:9128, 10.0.0.3:9128]\n"
      "  discovery_interval: 30s\n"
      "  forward_cancels: false\n"
      "  tls: {cert_file: /t/c.crt, key_file: /t/c.key, ca_file: /t/ca.crt, server_name: fleet}\n"
      "controller:\n"
      "  address: ctl:9130\n"
      "  lease_timeout: 3s\n"
      "  renew_interval: 250ms\n"
      "  forget_after: 1m\n"
      "  register_timeout: 2s\n"
      "  min_share: 2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  const PeeringConfig& p = config->peering;
  EXPECT_EQ(p.advertise_address, "10.1.2.3:9128");
  EXPECT_THAT(p.static_peers, ElementsAre("10.0.0.2:9128", "10.0.0.3:9128"));
  EXPECT_EQ(p.discovery_interval, absl::Seconds(30));
  EXPECT_FALSE(p.forward_cancels);
  EXPECT_TRUE(p.tls.enabled());
  EXPECT_EQ(p.tls.key_file, "/t/c.key");
  EXPECT_EQ(p.tls.ca_file, "/t/ca.crt");
  EXPECT_EQ(p.tls.server_name, "fleet");
  const ControllerConfig& c = config->controller;
  EXPECT_EQ(c.lease_timeout, absl::Seconds(3));
  EXPECT_EQ(c.renew_interval, absl::Milliseconds(250));
  EXPECT_EQ(c.forget_after, absl::Minutes(1));
  EXPECT_EQ(c.register_timeout, absl::Seconds(2));
  EXPECT_EQ(c.min_share, 2);
}

TEST(FleetSectionsTest, TypeErrorsNameFileKeyAndLine) {
  const std::string error = ErrorOf(
      "peering:\n"
      "  forward_cancels: maybe\n"
      "controller:\n"
      "  lease_timeout: soon\n"
      "  min_share: -1\n");
  EXPECT_THAT(error, HasSubstr(std::string(kFile) +
                               ": peering.forward_cancels: expected true or false, got \"maybe\" "
                               "(line 3)"));
  EXPECT_THAT(error, HasSubstr(std::string(kFile) + ": controller.lease_timeout: "));
  EXPECT_THAT(error, HasSubstr("(line 5)"));
  EXPECT_THAT(error, HasSubstr("controller.min_share: expected a non-negative integer"));
}

TEST(FleetSectionsTest, UnknownControllerKeysAreErrorsWithASuggestion) {
  EXPECT_THAT(ErrorOf("controller: {min_shares: 1}\n"),
              HasSubstr("unknown key \"controller.min_shares\", did you mean "
                        "\"controller.min_share\"?"));
}

TEST(FleetSectionsTest, UnknownPeeringKeysAreWarningsForOlderConfigs) {
  auto config = Load("peering: {unix_socket_dir: /run/pgfleet, tls: {crt: x}}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->warnings, ElementsAre("peering.tls.crt: unknown key, ignored",
                                            "peering.unix_socket_dir: unknown key, ignored"));
}

TEST(FleetSectionsTest, NotAMappingIsAnError) {
  EXPECT_THAT(ErrorOf("peering: yes\n"), HasSubstr("peering: expected a mapping, got \"yes\""));
  EXPECT_THAT(ErrorOf("controller: [a]\n"),
              HasSubstr("controller: expected a mapping, got a list"));
}

TEST(FleetSectionsTest, AddressesMustBeHostPort) {
  const std::string error = ErrorOf(
      "peering: {listen: nowhere, token_file: /t, static_peers: [\"a:1\", b]}\n"
      "controller: {address: \"ctl:99999\"}\n");
  EXPECT_THAT(error, HasSubstr(std::string(kFile) +
                               ": peering.listen: expected host:port, got \"nowhere\" (line 2)"));
  EXPECT_THAT(error, HasSubstr("peering.static_peers[1]: expected host:port, got \"b\""));
  EXPECT_THAT(error, HasSubstr("controller.address: expected host:port, got \"ctl:99999\""));
}

TEST(FleetSectionsTest, PeeringPortNeedsATokenOrTls) {
  EXPECT_THAT(ErrorOf("peering: {listen: \"0.0.0.0:9128\"}\n"),
              HasSubstr("peering.listen: needs peering.token_file or peering.tls"));
  EXPECT_TRUE(Load("peering:\n  listen: 0.0.0.0:9128\n"
                   "  tls: {cert_file: /tls/tls.crt, key_file: /tls/tls.key, ca_file: /tls/ca}\n")
                  .ok());
  EXPECT_THAT(ErrorOf("peering: {tls: {cert_file: /tls/tls.crt}}\n"),
              HasSubstr("peering.tls: cert_file needs key_file and ca_file"));
  EXPECT_THAT(ErrorOf("peering: {tls: {key_file: /tls/tls.key}}\n"),
              HasSubstr("peering.tls: key_file and ca_file need cert_file"));
  EXPECT_THAT(ErrorOf("peering: {discovery_dns: peers}\n"),
              HasSubstr("peering.discovery_dns: needs peering.listen"));
}

TEST(FleetSectionsTest, LeaseTimingsMustNest) {
  EXPECT_THAT(ErrorOf("controller: {lease_timeout: 1s, renew_interval: 500ms}\n"),
              HasSubstr("controller.lease_timeout: must be at least 3 x controller.renew_interval "
                        "(line 2)"));
  EXPECT_THAT(ErrorOf("controller: {lease_timeout: 10s, forget_after: 15s}\n"),
              HasSubstr("controller.forget_after: must be at least 2 x controller.lease_timeout"));
  EXPECT_THAT(ErrorOf("controller: {renew_interval: 0}\n"),
              HasSubstr("controller.renew_interval: must be positive"));
  EXPECT_TRUE(Load("controller: {lease_timeout: 3s, renew_interval: 1s, forget_after: 6s}\n").ok());
}

TEST(FleetSectionsTest, ConfigsBuiltInCodeAreCheckedToo) {
  Config config;
  config.source_path = kFile;
  EXPECT_TRUE(ValidateFleetSections(config).ok());
  config.controller.min_share = -1;
  config.peering.listen = "0.0.0.0:9128";
  const absl::Status status = ValidateFleetSections(config);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(std::string(kFile) + ": controller.min_share: must not be negative"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("peering.listen: needs peering.token_file"));
}

}  // namespace fleet_sections_test
}  // namespace pgfleet::config
