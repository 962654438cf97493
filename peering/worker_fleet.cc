// Worker-side fleet wiring.
#include "peering/worker_fleet.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/random.h"
#include "pooler/base/status_macros.h"
#include "pooler/base/strings.h"

namespace pgfleet::peering {

WorkerFleet::WorkerFleet(net::EventLoop& loop, FleetOptions options, PeerCredentials credentials)
    : loop_(loop), options_(std::move(options)), credentials_(std::move(credentials)) {}

WorkerFleet::~WorkerFleet() {
  pod_lease_.reset();
  lease_.reset();
  dns_.reset();
}

absl::StatusOr<std::unique_ptr<WorkerFleet>> WorkerFleet::Create(net::EventLoop& loop,
                                                                 const config::Config& fleet_config,
                                                                 uint32_t local_peer_id,
                                                                 const std::string& runtime_dir) {
  ASSIGN_OR_RETURN(FleetOptions options, ParseFleetOptions(fleet_config));
  for (const auto& warning : options.warnings) {
    PGFLEET_LOG(kWarning, "config_warning", "problem=", base::LogQuote(warning));
  }
  ASSIGN_OR_RETURN(PeerCredentials credentials, PeerCredentials::Load(options.peering));
  auto fleet = std::unique_ptr<WorkerFleet>(
      new WorkerFleet(loop, std::move(options), std::move(credentials)));
  fleet->fleet_config_ = fleet_config;
  fleet->local_peer_id_ = local_peer_id;
  fleet->pod_id_ = PodIdFor(runtime_dir);
  const PeeringOptions& peering = fleet->options_.peering;
  const std::string advertise = ResolveAdvertiseAddress(peering);
  if (!peering.listen.empty() || !peering.static_peers.empty() ||
      fleet->options_.controller.enabled()) {
    fleet->directory_ = std::make_unique<FleetDirectory>(advertise);
    fleet->directory_->SetStaticPeers(peering.static_peers);
  }
  if (!peering.listen.empty() && advertise.empty()) {
    PGFLEET_LOG(kWarning, "peering_not_advertised", "listen=", peering.listen,
                " effect=\"other pods cannot forward cancels here\"");
  }
  if (fleet->options_.controller.enabled()) {
    controller::LeaseIdentity identity{fleet->pod_id_, local_peer_id, advertise};
    fleet->lease_ = std::make_unique<controller::LeaseClient>(
        loop, fleet->options_.controller, fleet->credentials_, std::move(identity));
  }
  return fleet;
}

uint32_t WorkerFleet::RegisterPeerId() {
  return lease_ != nullptr ? lease_->Register() : local_peer_id_;
}

void WorkerFleet::Start(budget::PodServerCounts* pod_counts, bool lone_worker) {
  const PeeringOptions& peering = options_.peering;
  if (!peering.discovery_dns.empty() && directory_ != nullptr) {
    int port = 0;
    (void)absl::SimpleAtoi(peering.listen.substr(peering.listen.rfind(':') + 1), &port);
    FleetDirectory* directory = directory_.get();
    dns_ = std::make_unique<DnsDiscovery>(loop_, peering.discovery_dns, port,
                                          peering.discovery_interval,
                                          [directory](std::vector<std::string> peers) {
                                            directory->SetDiscoveredPeers(std::move(peers));
                                          });
    dns_->Start();
  }
  if (lease_ == nullptr) return;
  FleetDirectory* directory = directory_.get();
  lease_->Attach(nullptr, [directory](const controller::v1::Directory& d) {
    std::map<uint32_t, std::set<std::string>> pods;
    for (const auto& pod : d.pods()) {
      if (pod.block() != 0 && !pod.peering_address().empty()) {
        pods[pod.block()].insert(pod.peering_address());
      }
    }
    directory->SetPods(std::move(pods));
  });
  if (lone_worker) {
    auto pod_lease = PodLease::Create(loop_, fleet_config_, pod_id_, pod_counts);
    if (!pod_lease.ok()) {
      PGFLEET_LOG(kError, "pod_lease_failed",
                  "error=", base::LogQuote(base::Sv(pod_lease.status().message())));
      return;
    }
    pod_lease_ = *std::move(pod_lease);
    pod_lease_->Start();
  }
}

void WorkerFleet::UpdateConfig(const config::Config& fleet_config) {
  fleet_config_ = fleet_config;
  if (pod_lease_ != nullptr) pod_lease_->UpdateConfig(fleet_config);
}

std::vector<ListenSpec> WorkerFleet::ListenPorts(const std::string& unix_address) const {
  std::vector<ListenSpec> ports = {{unix_address, nullptr}};
  if (!options_.peering.listen.empty()) {
    ports.push_back({options_.peering.listen, credentials_.TcpServerCredentials()});
  }
  return ports;
}

PeeringServiceOptions WorkerFleet::ServiceOptions(uint32_t own_peer_id) const {
  PeeringServiceOptions out;
  out.own_peer_id = own_peer_id;
  out.credentials = &credentials_;
  return out;
}

void WorkerFleet::Leave() {
  if (lease_ != nullptr) lease_->Leave(absl::Seconds(1));
  if (pod_lease_ != nullptr) pod_lease_->Stop();
}

}  // namespace pgfleet::peering
