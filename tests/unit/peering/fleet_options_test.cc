// The peering and controller options as the processes take them: the loaded sections, checked
// again for configs built in code, with the loader's warnings. (tests/unit/config/
// fleet_sections_test.cc covers the YAML.)
#include "peering/fleet_options.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::peering {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

config::Config Sections(const std::string& yaml) {
  auto config = config::LoadConfigText("databases: {app: {}}\n" + yaml, "/etc/pgfleet.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.value_or(config::Config{});
}

TEST(FleetOptionsTest, TakesTheLoadedSectionsAndTheirWarnings) {
  auto options = ParseFleetOptions(
      Sections("peering: {static_peers: [10.0.0.2:9128], unix_socket_dir: /run}\n"
               "controller: {address: ctl:9130, renew_interval: 250ms, min_share: 2}\n"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_THAT(options->peering.static_peers, ElementsAre("10.0.0.2:9128"));
  EXPECT_TRUE(options->controller.enabled());
  EXPECT_EQ(options->controller.renew_interval, absl::Milliseconds(250));
  EXPECT_EQ(options->controller.min_share, 2);
  EXPECT_THAT(options->warnings, ElementsAre(HasSubstr("peering.unix_socket_dir")));
}

TEST(FleetOptionsTest, EmptySectionsMeanNoPeeringPortAndNoController) {
  auto options = ParseFleetOptions(config::Config{});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->peering.listen.empty());
  EXPECT_FALSE(options->controller.enabled());
  EXPECT_EQ(options->controller.lease_timeout, absl::Seconds(15));
  EXPECT_TRUE(options->peering.forward_cancels);
}

TEST(FleetOptionsTest, ConfigsBuiltInCodeAreCheckedAndErrorsNameFileAndKey) {
  config::Config config;
  config.source_path = "/etc/pgfleet/pgfleet.yaml";
  config.peering.listen = "0.0.0.0:9128";
  config.controller.lease_timeout = absl::Seconds(1);
  config.controller.renew_interval = absl::Milliseconds(500);
  auto options = ParseFleetOptions(config);
  ASSERT_FALSE(options.ok());
  const std::string message(options.status().message());
  EXPECT_THAT(message, HasSubstr("/etc/pgfleet/pgfleet.yaml: peering.listen: needs "
                                 "peering.token_file or peering.tls"));
  EXPECT_THAT(message, HasSubstr("/etc/pgfleet/pgfleet.yaml: controller.lease_timeout: must be at "
                                 "least 3 x controller.renew_interval"));
  config.peering.token_file = "/etc/pgfleet/peering-token";
  config.controller.lease_timeout = absl::Seconds(3);
  config.controller.forget_after = absl::Seconds(6);
  EXPECT_TRUE(ParseFleetOptions(config).ok());
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
