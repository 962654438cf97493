// max_client_conn for a pod: a count of client connections in shared memory (a memfd the
// supervisor creates and every worker maps), so the pod admits exactly max_client_conn clients
// however the kernel spreads them over workers. Without a supervisor it counts locally.
// A library of its own (pgfleet_client_budget) so that the supervisor links no pool code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

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

  // Even client balance (docs/architecture.md, "Client balance"): the kernel spreads a port's
  // connections over the workers by a hash of their addresses, so with few clients some workers
  // get twice as many as others. A worker that takes clients its siblings pass it says so here
  // while it serves (off from the start of its shutdown).
  void SetTakesClients(bool takes);
  // The sibling that takes clients and holds the fewest, when that is fewer than this worker
  // holds: a new connection goes there. nullopt without one (or without a shared region, or in
  // a region made by an older binary that has no room for the balance).
  std::optional<uint32_t> SiblingWithFewerClients() const;
  // A connection passed to `sibling` is counted as the sibling's at once, not when it arrives:
  // workers that choose where to pass their own new connections meanwhile must see it, or they
  // all pick the same sibling. The sibling then takes it as holding its slot. False when the pod
  // is at max_client_conn (the connection stays, to be refused here) or there is no balance.
  [[nodiscard]] bool TryAcquireFor(uint32_t sibling);
  // Gives back what TryAcquireFor took when the connection could not be passed after all.
  void ReleaseFor(uint32_t sibling);

 private:
  // Shared by every worker of the pod. A worker of a newer binary may attach to the region of
  // an older supervisor (a rolling restart after an upgrade): fields are only ever added at the
  // end, and a worker uses only what the region's size holds.
  struct Region {
    std::atomic<int64_t> total;
    std::atomic<int64_t> per_slot[kSlots];
    // Even client balance (pre-balance regions end above).
    std::atomic<uint32_t> max_slot;  // the highest slot that ever attached (bounds scans)
    std::atomic<uint8_t> takes_clients[kSlots];
  };
  static constexpr size_t kPreBalanceSize = offsetof(Region, max_slot);
  // Maps the region; `size` is what the region holds (at most sizeof(Region)).
  static Region* Map(int fd, size_t* size);
  // TryAcquire and Release for any slot of the shared region.
  bool TryAcquireIn(uint32_t slot);
  void ReleaseIn(uint32_t slot);

  int limit_;
  int64_t local_ = 0;
  Region* region_ = nullptr;
  size_t region_size_ = 0;
  bool balance_ = false;  // the region has the balance fields
  uint32_t slot_ = 0;
};

}  // namespace pgfleet::budget

namespace pgfleet::pool {
// The pools' name for it (pool_registry.h).
using budget::ClientBudget;
}  // namespace pgfleet::pool
