// The pod's budget lease with pgfleet-controller (docs/architecture.md, "Connection budget" and
// "One pool per pod"): one lease for the whole pod, not one per worker. The pod reports its
// servers and demand per budgeted database, read from the pod's shared counts
// (budget::PodServerCounts), and writes the share it is granted back into them; every worker
// enforces that share on the pod's servers (pool::ServerBudget::EnforcePodShares). The lease's
// timing is written there too, so that the workers fall back to the floors on their own if the
// holder dies, and a restarted holder rejoins with what the pod holds.
//
// The supervisor runs the holder as a process of its own (`pgfleet --pod_lease`): the
// supervisor creates no gRPC objects, and a worker may come and go (rolling restarts) while the
// lease must not. RunPodLeaseProcess is that process's main loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "peering/controller/lease_client.h"
#include "peering/credentials.h"
#include "peering/fleet_options.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/config/config.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering {

// The lease's view of the pod: its budgeted databases in the shared counts.
class PodCapTarget final : public controller::CapTarget {
 public:
  // `counts` must outlive this object.
  PodCapTarget(budget::PodServerCounts* counts, config::Config config)
      : counts_(counts), config_(std::move(config)) {}

  void SetConfig(config::Config config) { config_ = std::move(config); }
  std::vector<Usage> Usages() override;
  void SetCap(const std::string& database, int cap, int floor) override;
  // The workers close servers over the share; the lease sees them go in Usages().open.
  int Enforce(const std::string&) override { return 0; }

 private:
  budget::PodServerCounts* counts_;
  config::Config config_;
};

class PodLease {
 public:
  // Reads the options and credentials. `pod_id` is the one the pod's workers join with
  // (PodIdFor); `counts` the pod's shared counts, which must outlive this object.
  static absl::StatusOr<std::unique_ptr<PodLease>> Create(net::EventLoop& loop,
                                                          const config::Config& config,
                                                          const std::string& pod_id,
                                                          budget::PodServerCounts* counts);
  ~PodLease();

  // Takes over what the pod holds (from the counts), then joins the controller and keeps the
  // counts up to date with the lease.
  void Start();
  void UpdateConfig(const config::Config& config) { target_.SetConfig(config); }
  // Every server of the pod is closed (the workers are gone): the share is freed at once. With
  // servers still open (this holder restarts while the pod serves), it leaves nothing: the next
  // holder rejoins with them.
  void Stop();

 private:
  PodLease(net::EventLoop& loop, const config::Config& config, FleetOptions options,
           PeerCredentials credentials, budget::PodServerCounts* counts);
  // Writes the lease's start and timings into the counts, where the workers time it too.
  void PublishTimes();

  net::EventLoop& loop_;
  FleetOptions options_;
  PeerCredentials credentials_;
  budget::PodServerCounts* counts_;
  PodCapTarget target_;
  std::unique_ptr<controller::LeaseClient> lease_;
  net::EventLoop::TimerId publish_timer_ = 0;
  uint64_t backends_reported_ = 0;  // counts_->backends_recorded() at the last look
};

// `pgfleet --pod_lease`: holds the pod's lease until SIGTERM or SIGINT (SIGHUP reloads the
// budgets). Returns the exit status.
int RunPodLeaseProcess(const std::string& config_path, const std::string& runtime_dir,
                       int pod_servers_fd);

// The pod's id, shared by its workers through `<runtime_dir>/pod-id` (the first worker writes
// it); random per supervisor run. A lone worker gets a fresh random id.
std::string PodIdFor(const std::string& runtime_dir);

}  // namespace pgfleet::peering
