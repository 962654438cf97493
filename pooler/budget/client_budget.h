// max_client_conn for a pod: a count of client connections in shared memory (a memfd the
// supervisor creates and every worker maps), so the pod admits exactly max_client_conn clients
// however the kernel spreads them over workers. Without a supervisor it counts locally.
// A library of its own (pgfleet_client_budget) so that the supervisor links no pool code.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace pgfleet::budget {

class ClientBudget {
 public:
  // Slots are peer ids; each worker's own count lets the supervisor return a dead worker's
  // connections to the pool.
  static constexpr uint32_t kSlots = 65536;

  // Creates the shared region; returns its fd (inheritable). Supervisor only.
  static absl::StatusOr<int> CreateSharedRegion();
  // Returns a dead worker's connections (supervisor, after waitpid).
  static void ReleaseSlot(int region_fd, uint32_t slot);

  // A local budget (no sharing).
  explicit ClientBudget(int limit) : limit_(limit) {}
  ~ClientBudget();
  // Counts in the shared region from now on, as worker `slot`.
  [[nodiscard]] absl::Status AttachShared(int region_fd, uint32_t slot);

  void set_limit(int limit) { limit_ = limit; }
  // True when the client may stay (limit 0 = unlimited); call Release() once when it goes.
  [[nodiscard]] bool TryAcquire();
  void Release();
  int64_t pod_total() const;

 private:
  struct Region {
    std::atomic<int64_t> total;
    std::atomic<int64_t> per_slot[kSlots];
  };
  static Region* Map(int fd);

  int limit_;
  int64_t local_ = 0;
  Region* region_ = nullptr;
  uint32_t slot_ = 0;
};

}  // namespace pgfleet::budget

namespace pgfleet::pool {
// The pools' name for it (pool_registry.h).
using budget::ClientBudget;
}  // namespace pgfleet::pool
