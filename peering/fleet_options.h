// The `peering:` and `controller:` sections of pgfleet.yaml, as the peering code uses them. The
// config loader reads them into typed structs (pooler/config/config.h) and checks them with the
// rest of the config, so errors name the file, the key and the line; this is the one place the
// workers, pgfleet-controller and `pgfleet --check-config` take them from.
//
//   peering:
//     runtime_dir: /run/pgfleet        # where the supervisor makes the pod's socket directory
//     listen: 0.0.0.0:9128             # the pod's TCP endpoint for other pods (every worker of
//                                      # the pod binds it with SO_REUSEPORT); empty = none
//     advertise_address: 10.1.2.3:9128 # how other pods reach it, or:
//     advertise_address_env: POD_IP    # the host from this environment variable, listen's port
//     token_file: /etc/pgfleet/peering-token   # shared token, required with `listen`...
//     tls: {cert_file: ..., key_file: ..., ca_file: ..., server_name: pgfleet}  # ...or mTLS
//     static_peers: [10.0.0.2:9128]    # other pods, without a controller
//     discovery_dns: pgfleet-peers.ns.svc.cluster.local  # headless Service; port from listen
//   controller:
//     address: pgfleet-controller:9130 # workers lease their budget shares from here
//     listen: 0.0.0.0:9130             # pgfleet-controller binds this
//     lease_timeout: 15s               # a worker cut off this long falls back to its floor
//     renew_interval: 1s               # reports (demand, open servers) and renewals
//     forget_after: 5m                 # a silent worker is then assumed gone (it drops to 0)
//     min_share: 1                     # the floor per worker (at most half of a budget)
//     register_timeout: 5s             # how long a starting worker waits for its peer id
//     monitor: "host=db user=pgfleet_monitor dbname=postgres"  # libpq; pgfleet-controller asks
//                                      # PostgreSQL which backends of a lost pod are left
//     lost_room_hold: 35s              # a lost pod's room it cannot check counts this long
//     terminate_lost_backends: false   # pg_terminate_backend a lost pod's backends
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pooler/config/config.h"

namespace pgfleet::peering {

using TlsOptions = config::PeeringTlsConfig;
using PeeringOptions = config::PeeringConfig;
using ControllerOptions = config::ControllerConfig;

struct FleetOptions {
  PeeringOptions peering;
  ControllerOptions controller;
  // Keys that mean nothing to this version, one "peering.x: unknown key, ignored" each.
  std::vector<std::string> warnings;
};

// Both sections, checked again (a Config may have been built in code), with the warnings the
// loader kept. Errors are InvalidArgument, one line per problem, each naming the file and the key:
// "/etc/pgfleet.yaml: controller.lease_timeout: must be at least 3 x controller.renew_interval".
// Files (token, certificates) are not read here, so a config can be checked away from the pod;
// LoadToken and the credentials do that at start.
absl::StatusOr<FleetOptions> ParseFleetOptions(const config::Config& config);

// The advertised peering address: advertise_address, else the host from advertise_address_env
// with listen's port, else listen when its host is not a wildcard; empty when none of them works.
std::string ResolveAdvertiseAddress(const PeeringOptions& options);

}  // namespace pgfleet::peering
