// Controller metrics.
#include "peering/controller/controller_metrics.h"

#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <exception>
#include <set>

#include "absl/strings/str_cat.h"

namespace pgfleet::peering::controller {
namespace {

prometheus::Family<prometheus::Gauge>* AddGauge(prometheus::Registry& registry, const char* name,
                                                const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

// Updates the per-(database, peer) series of `family`, removing those no longer present.
void SyncSeries(prometheus::Family<prometheus::Gauge>* family,
                std::map<std::pair<std::string, std::string>, prometheus::Gauge*>& series,
                const std::map<std::pair<std::string, std::string>, double>& values) {
  for (auto it = series.begin(); it != series.end();) {
    if (!values.contains(it->first)) {
      family->Remove(it->second);
      it = series.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, value] : values) {
    auto it = series.find(key);
    if (it == series.end()) {
      it = series.emplace(key, &family->Add({{"database", key.first}, {"member", key.second}}))
               .first;
    }
    it->second->Set(value);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerMetrics>> ControllerMetrics::Start(
    const std::string& listen) {
  auto metrics = std::unique_ptr<ControllerMetrics>(new ControllerMetrics());
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics.listen: cannot serve on ", listen, ": ", e.what()));
  }
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  auto& r = *metrics->registry_;
  metrics->members_ = AddGauge(
      r, kMembersMetric,
      "Members the controller counts (each worker, and each pod's budget lease), by lease state");
  metrics->pods_ = AddGauge(r, kPodsMetric, "Pods with at least one member");
  metrics->recovering_ = AddGauge(
      r, kRecoveringMetric, "1 while a restarted controller waits for the members before granting");
  metrics->budget_ = AddGauge(r, kBudgetMetric, "Fleet-wide max_db_connections per database");
  metrics->committed_ = AddGauge(
      r, kCommittedMetric,
      "Server connections workers may hold per database (granted, not yet released, reserved)");
  metrics->open_ =
      AddGauge(r, kOpenMetric, "Server connections open per database, as workers last reported");
  metrics->share_ = AddGauge(r, kShareMetric, "A member's cap per database");
  metrics->floor_ = AddGauge(r, kFloorMetric, "A member's floor per database");
  metrics->demand_ = AddGauge(r, kDemandMetric, "A member's demand per database (smoothed)");
  metrics->events_ = AddGauge(
      r, kEventsMetric,
      "Controller events since start: joins, rejoins, leaves, lease_expiries, forgotten, grants, "
      "raises, lowers, acks, refused_calls");
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  return metrics;
}

ControllerMetrics::~ControllerMetrics() = default;

void ControllerMetrics::Update(const ControllerService& service) {
  std::map<std::string, int> by_state = {{"live", 0}, {"detached", 0}, {"expired", 0}};
  for (const auto& member : service.Members()) ++by_state[member.state];
  for (const auto& [state, n] : by_state) members_->Add({{"state", state}}).Set(n);
  pods_->Add({}).Set(static_cast<double>(service.pod_count()));
  recovering_->Add({}).Set(service.recovering() ? 1 : 0);
  const auto& allocator = service.allocator();
  for (const auto& [db, open] : service.ReportedOpen()) {
    budget_->Add({{"database", db}}).Set(allocator.Budget(db).value_or(0));
    committed_->Add({{"database", db}}).Set(allocator.Committed(db));
    open_->Add({{"database", db}}).Set(open);
  }
  std::map<std::pair<std::string, std::string>, double> shares, floors, demands;
  for (const auto& row : service.Shares()) {
    const auto key = std::make_pair(row.database, row.member);
    shares[key] = row.cap;
    floors[key] = row.floor;
    demands[key] = row.demand;
  }
  SyncSeries(share_, share_series_, shares);
  SyncSeries(floor_, floor_series_, floors);
  SyncSeries(demand_, demand_series_, demands);
  const ControllerStats& s = service.stats();
  const std::pair<const char*, uint64_t> events[] = {
      {"joins", s.joins},         {"rejoins", s.rejoins},
      {"leaves", s.leaves},       {"lease_expiries", s.lease_expiries},
      {"forgotten", s.forgotten}, {"grants", s.grants},
      {"raises", s.raises},       {"lowers", s.lowers},
      {"acks", s.acks},           {"refused_calls", s.refused_calls}};
  for (const auto& [name, value] : events) {
    events_->Add({{"event", name}}).Set(static_cast<double>(value));
  }
}

}  // namespace pgfleet::peering::controller
