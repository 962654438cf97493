// The typed peering: and controller: sections: what the chart renders loads, mistakes name the
// key, and an unauthenticated peering port is refused.
#include "peering/fleet_options.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::peering {
namespace {

using ::testing::HasSubstr;

config::Config WithSections(std::map<std::string, std::string> peering,
                            std::map<std::string, std::string> controller) {
  config::Config config;
  config.source_path = "/etc/pgfleet/pgfleet.yaml";
  config.peering = std::move(peering);
  config.controller = std::move(controller);
  return config;
}

TEST(FleetOptionsTest, EmptySectionsMeanNoPeeringPortAndNoController) {
  auto options = ParseFleetOptions(WithSections({}, {}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->peering.listen.empty());
  EXPECT_FALSE(options->controller.enabled());
  EXPECT_EQ(options->controller.lease_timeout, absl::Seconds(15));
  EXPECT_TRUE(options->peering.forward_cancels);
}

TEST(FleetOptionsTest, WhatTheHelmChartRendersLoads) {
  auto options = ParseFleetOptions(WithSections(
      {{"listen", "0.0.0.0:9128"},
       {"advertise_address_env", "POD_IP"},
       {"discovery_dns", "pgfleet-peers.default.svc.cluster.local"},
       {"token_file", "/etc/pgfleet/peering-token"},
       {"runtime_dir", "/run/pgfleet"}},
      {{"address", "pgfleet-controller.default.svc.cluster.local:9130"},
       {"listen", "0.0.0.0:9130"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->warnings.empty());
  EXPECT_EQ(options->peering.token_file, "/etc/pgfleet/peering-token");
  EXPECT_TRUE(options->controller.enabled());
}

TEST(FleetOptionsTest, TimingsAndStaticPeersParse) {
  auto options = ParseFleetOptions(WithSections(
      {{"static_peers.0", "10.0.0.2:9128"}, {"static_peers.1", "10.0.0.3:9128"}},
      {{"address", "ctl:9130"},
       {"lease_timeout", "3s"},
       {"renew_interval", "250ms"},
       {"forget_after", "1m"},
       {"min_share", "2"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->peering.static_peers, ::testing::ElementsAre("10.0.0.2:9128",
                                                                     "10.0.0.3:9128"));
  EXPECT_EQ(options->controller.renew_interval, absl::Milliseconds(250));
  EXPECT_EQ(options->controller.min_share, 2);
}

TEST(FleetOptionsTest, ErrorsNameFileAndKey) {
  auto options = ParseFleetOptions(WithSections(
      {{"listen", "nowhere"}}, {{"lease_timeout", "soon"}, {"min_shares", "1"}}));
  ASSERT_FALSE(options.ok());
  const std::string message(options.status().message());
  EXPECT_THAT(message, HasSubstr("/etc/pgfleet/pgfleet.yaml: peering.listen: expected host:port"));
  EXPECT_THAT(message, HasSubstr("controller.lease_timeout: expected a duration"));
  EXPECT_THAT(message, HasSubstr("controller.min_shares: unknown key"));
}

TEST(FleetOptionsTest, PeeringPortWithoutTokenOrTlsIsRefused) {
  auto options = ParseFleetOptions(WithSections({{"listen", "0.0.0.0:9128"}}, {}));
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr("peering.listen: needs peering.token_file or peering.tls"));
  EXPECT_TRUE(ParseFleetOptions(WithSections({{"listen", "0.0.0.0:9128"},
                                              {"tls.cert_file", "/tls/tls.crt"},
                                              {"tls.key_file", "/tls/tls.key"},
                                              {"tls.ca_file", "/tls/ca.crt"}},
                                             {}))
                  .ok());
}

TEST(FleetOptionsTest, LeaseMustCoverSeveralRenewals) {
  auto options = ParseFleetOptions(
      WithSections({}, {{"lease_timeout", "1s"}, {"renew_interval", "500ms"}}));
  ASSERT_FALSE(options.ok());
  EXPECT_THAT(std::string(options.status().message()),
              HasSubstr("controller.lease_timeout: must be at least 3 x"));
}

TEST(FleetOptionsTest, UnknownPeeringKeysAreWarningsForOlderConfigs) {
  auto options = ParseFleetOptions(WithSections({{"unix_socket_dir", "/run/pgfleet"}}, {}));
  ASSERT_TRUE(options.ok());
  EXPECT_THAT(options->warnings, ::testing::ElementsAre(HasSubstr("peering.unix_socket_dir")));
}

TEST(FleetOptionsTest, AdvertiseAddressComesFromTheEnvironmentWithTheListenPort) {
  setenv("PGFLEET_TEST_POD_IP", "10.1.2.3", 1);
  PeeringOptions options;
  options.listen = "0.0.0.0:9128";
  EXPECT_EQ(ResolveAdvertiseAddress(options), "");  // a wildcard is no address
  options.advertise_address_env = "PGFLEET_TEST_POD_IP";
  EXPECT_EQ(ResolveAdvertiseAddress(options), "10.1.2.3:9128");
  options.advertise_address = "pod-a:9128";
  EXPECT_EQ(ResolveAdvertiseAddress(options), "pod-a:9128");
  options = PeeringOptions();
  options.listen = "127.0.0.2:7000";
  EXPECT_EQ(ResolveAdvertiseAddress(options), "127.0.0.2:7000");
}

}  // namespace
}  // namespace pgfleet::peering
