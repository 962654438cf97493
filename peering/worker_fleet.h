// A worker's place in the fleet, wired in one object so the worker only calls it: typed
// peering/controller options, peering credentials, the pod id, the cross-pod directory (from the
// controller, static peers and DNS), and the lease with pgfleet-controller that sets this
// worker's peer id. The budget's lease is the pod's (peering/pod_lease.h): it reaches the pools
// only through the pod's shared counts, so peering links no pool code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "peering/controller/lease_client.h"
#include "peering/credentials.h"
#include "peering/fleet_directory.h"
#include "peering/fleet_options.h"
#include "peering/peering_service.h"
#include "peering/pod_lease.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/config/config.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering {

class WorkerFleet {
 public:
  // Reads the options and the credentials' files. `local_peer_id` is the id the supervisor gave
  // (1 for a lone worker); `runtime_dir` the pod's socket directory (empty for a lone worker).
  static absl::StatusOr<std::unique_ptr<WorkerFleet>> Create(net::EventLoop& loop,
                                                             const config::Config& fleet_config,
                                                             uint32_t local_peer_id,
                                                             const std::string& runtime_dir);
  ~WorkerFleet();

  // The peer id to mint cancel keys with: assigned by the controller when one is configured
  // (blocks before the loop runs, up to controller.register_timeout), else the local id.
  uint32_t RegisterPeerId();
  // Starts DNS discovery and the worker's lease (its peer id and the directory). The pod's
  // budget is leased by the pod (PodLease, run by the supervisor); a worker without a supervisor
  // (`pod_counts` private to it) holds its pod's lease itself, over `pod_counts`, which must
  // outlive this object.
  void Start(budget::PodServerCounts* pod_counts, bool lone_worker);
  // A controller grants the budgeted databases' shares: the worker enforces them on the pod.
  bool budget_caps() const { return options_.controller.enabled(); }
  // The peering ports: `unix_address`, plus the pod's TCP port when peering.listen is set.
  std::vector<ListenSpec> ListenPorts(const std::string& unix_address) const;
  // Options for the worker's PeeringService (the caller adds relay_to_sibling).
  PeeringServiceOptions ServiceOptions(uint32_t own_peer_id) const;
  // A reloaded config: new budgets.
  void UpdateConfig(const config::Config& fleet_config);
  // After the loop stopped with every server closed: leaves the controller.
  void Leave();

  const FleetOptions& options() const { return options_; }
  const PeerCredentials* credentials() const { return &credentials_; }
  // Null when this pod has no cross-pod peering.
  const FleetDirectory* directory() const { return directory_.get(); }
  const controller::LeaseClient* lease() const { return lease_.get(); }

 private:
  WorkerFleet(net::EventLoop& loop, FleetOptions options, PeerCredentials credentials);

  net::EventLoop& loop_;
  config::Config fleet_config_;  // the whole fleet's budgets, not this worker's static share
  FleetOptions options_;
  PeerCredentials credentials_;
  uint32_t local_peer_id_ = 1;
  std::string pod_id_;
  std::unique_ptr<FleetDirectory> directory_;
  std::unique_ptr<DnsDiscovery> dns_;
  std::unique_ptr<controller::LeaseClient> lease_;
  std::unique_ptr<PodLease> pod_lease_;  // a lone worker's
};

}  // namespace pgfleet::peering
