// The lease's view of this worker's pools (peering::FleetCapTarget over the PoolRegistry): what
// each database with a fleet budget uses and wants, and the caps the controller grants. Here, in
// the worker that links both, so that peering links no pool code.
#pragma once

#include <string>
#include <vector>

#include "peering/worker_fleet.h"
#include "pooler/config/config.h"
#include "pooler/pool/pool_registry.h"

namespace pgfleet::worker {

class RegistryCapTarget final : public peering::FleetCapTarget {
 public:
  // `registry` must outlive this object.
  explicit RegistryCapTarget(pool::PoolRegistry* registry) : registry_(registry) {}

  void EnableCaps() override;
  void SetFleetConfig(const config::Config& fleet) override { fleet_ = fleet; }
  std::vector<Usage> Usages() override;
  void SetCap(const std::string& database, int cap) override;
  int Enforce(const std::string& database, bool force) override;

 private:
  pool::PoolRegistry* registry_;
  config::Config fleet_;  // the whole fleet's budgets, not this worker's static share
};

}  // namespace pgfleet::worker
