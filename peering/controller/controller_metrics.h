// pgfleet-controller's /metrics (prometheus-cpp, served by its Exposer on metrics.listen):
// members by state, pods, recovery, each database's budget, committed room and the open server
// connections workers report, each member's share and demand, and counters of joins, grants,
// acks and lease expiries. Gauges are refreshed from the loop thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "peering/controller/controller_service.h"

namespace prometheus {
class Exposer;
class Registry;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace pgfleet::peering::controller {

// Every metric name the controller exports.
inline constexpr char kMembersMetric[] = "pgfleet_controller_members";
inline constexpr char kPodsMetric[] = "pgfleet_controller_pods";
inline constexpr char kRecoveringMetric[] = "pgfleet_controller_recovering";
inline constexpr char kBudgetMetric[] = "pgfleet_controller_budget";
inline constexpr char kCommittedMetric[] = "pgfleet_controller_committed_connections";
inline constexpr char kOpenMetric[] = "pgfleet_controller_open_connections";
inline constexpr char kShareMetric[] = "pgfleet_controller_share";
inline constexpr char kFloorMetric[] = "pgfleet_controller_floor";
inline constexpr char kDemandMetric[] = "pgfleet_controller_demand";
inline constexpr char kEventsMetric[] = "pgfleet_controller_events_total";

class ControllerMetrics {
 public:
  // Serves /metrics on `listen` ("host:port"); an error when it cannot bind.
  static absl::StatusOr<std::unique_ptr<ControllerMetrics>> Start(const std::string& listen);
  ~ControllerMetrics();

  // Loop thread: copies the service's state into the gauges.
  void Update(const ControllerService& service);

 private:
  ControllerMetrics() = default;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* members_ = nullptr;
  prometheus::Family<prometheus::Gauge>* pods_ = nullptr;
  prometheus::Family<prometheus::Gauge>* recovering_ = nullptr;
  prometheus::Family<prometheus::Gauge>* budget_ = nullptr;
  prometheus::Family<prometheus::Gauge>* committed_ = nullptr;
  prometheus::Family<prometheus::Gauge>* open_ = nullptr;
  prometheus::Family<prometheus::Gauge>* share_ = nullptr;
  prometheus::Family<prometheus::Gauge>* floor_ = nullptr;
  prometheus::Family<prometheus::Gauge>* demand_ = nullptr;
  prometheus::Family<prometheus::Gauge>* events_ = nullptr;  // monotonic, exported as counter
  // Per-member series, removed when the member goes.
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> share_series_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> floor_series_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> demand_series_;
};

}  // namespace pgfleet::peering::controller
