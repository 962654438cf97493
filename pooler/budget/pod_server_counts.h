// The pod's server connections counted in one place, so that a pod's workers are one pooler with
// one pool per (database, user): how many servers each pool, database and server user has open in
// the whole pod, and how many each worker holds, idle or wanted (docs/architecture.md, "One pool
// per pod").
//
// The counts live in shared memory (a memfd the supervisor creates and every worker maps) and are
// changed with atomics only: a reservation is a compare-and-swap under the limit, never a lock
// held across I/O. Each worker's own counts let the supervisor return a dead worker's servers
// (ReleaseWorker), as ClientBudget does for clients. Without a supervisor the region is private
// to the process and the same code counts one worker's servers.
//
// Keys are strings ("p<length of database>:<database><user>", "d<database>", "u<user>"), interned
// in a fixed open-addressing table the workers share. A worker is known by its local peer id
// (1..255): a worker and its replacement during a rolling restart count apart.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pgfleet::budget {

class PodServerCounts {
 public:
  static constexpr uint32_t kWorkers = 256;  // local peer ids are 8 bits
  static constexpr uint32_t kKeys = 2048;
  static constexpr size_t kMaxKeyLength = 192;
  // Backend pids of the pod's servers (RecordBackend): more than any pod's budget.
  static constexpr uint32_t kBackendSlots = 8192;

  using Key = uint32_t;
  // A limit of 0 is unlimited; a negative limit admits nothing.
  struct Limited {
    Key key;
    int limit;
  };

  // Creates the shared region; returns its fd (inheritable). Supervisor only.
  static absl::StatusOr<int> CreateSharedRegion();
  // Returns a dead worker's servers, idle counts and wants to the pod (supervisor, after waitpid).
  static void ReleaseWorker(int region_fd, uint32_t worker);
  // The same in two steps: its idle counts and wants go back now, while its servers stay in the
  // pod's totals (PostgreSQL may still run their backends) until ReleaseHeld. The worker's own
  // counts are cleared at once, so a worker restarted in its slot starts from zero.
  struct HeldServers {
    std::vector<std::pair<Key, int32_t>> open;            // per key, the servers still counted
    std::vector<std::pair<uint32_t, uint64_t>> backends;  // slots and their records, still listed
  };
  static HeldServers DetachWorker(int region_fd, uint32_t worker);
  static void ReleaseHeld(int region_fd, const HeldServers& held);

  // A private region (no sibling sees it), as worker 1.
  PodServerCounts();
  ~PodServerCounts();
  PodServerCounts(const PodServerCounts&) = delete;
  PodServerCounts& operator=(const PodServerCounts&) = delete;
  // Counts in the pod's region from now on, as `worker` (its local peer id).
  [[nodiscard]] absl::Status AttachShared(int region_fd, uint32_t worker);
  uint32_t worker() const { return worker_; }

  static std::string PoolKeyText(std::string_view database, std::string_view user);
  static std::string DatabaseKeyText(std::string_view database);
  static std::string UserKeyText(std::string_view user);
  // Servers of a pool pinned to their clients by session state (max_pinned_servers is the pod's).
  static std::string PinKeyText(std::string_view database, std::string_view user);
  // Clients of a database and of a user in the pod (max_db_client_connections and
  // max_user_client_connections), counted with TryReserve like servers.
  static std::string DatabaseClientsKeyText(std::string_view database);
  static std::string UserClientsKeyText(std::string_view user);
  // The key for `text`, added on first use; nullopt when the table is full or the text too long.
  std::optional<Key> Intern(std::string_view text);

  // Takes one server of room under every limit, or none: false when one is full.
  [[nodiscard]] bool TryReserve(std::initializer_list<Limited> limits);
  // Gives back one server of room for each key (a server closed, or a reservation not used).
  void Release(std::initializer_list<Key> keys);
  // A server moves from worker `from` to worker `to`: the pod's totals do not change. The sender
  // moves the count before the socket leaves, so a dead worker is never returned a server that
  // a sibling holds.
  void Transfer(std::initializer_list<Key> keys, uint32_t from, uint32_t to);
  // Servers open in the whole pod, and held by this worker.
  int Total(Key key) const;
  int Mine(Key key) const;

  // The backend pid of each open server, per database, so that the pod's lease can tell the
  // controller which backends are the pod's: when the pod is lost (killed, frozen, cut off), the
  // controller gives its room to others only once PostgreSQL no longer lists them (docs/
  // architecture.md, "Connection budget"). A record is one atomic word; it follows its server
  // to a sibling (MoveBackend) and stays listed while a dead worker's servers are held.
  // RecordBackend returns the record's slot, or -1 when every slot is taken.
  int RecordBackend(Key database, uint32_t pid);
  void ForgetBackend(int slot);
  void MoveBackend(int slot, uint32_t to);
  // The slot recording `pid` (a server that arrived from a sibling), or -1.
  int FindBackend(uint32_t pid) const;
  std::vector<uint32_t> BackendPids(Key database) const;
  // Counts every RecordBackend: the pod's lease reports at once when it moves, one load a tick.
  uint64_t backends_recorded() const;

  // This worker's idle servers and waiting clients of a pool, for siblings to see.
  void AddIdle(Key pool, int delta);
  void AddWaiting(Key pool, int delta);
  // A sibling (not this worker) with an idle server of `pool` (or, for a database or user key,
  // of a pool in it), the one with the most; nullopt when none.
  std::optional<uint32_t> SiblingWithIdle(Key pool) const;
  // Clients waiting for `pool` in the whole pod (this worker's included).
  int WaitingTotal(Key pool) const;
  // When this worker's longest-waiting client of `pool` started waiting (monotonic
  // microseconds), 0 when none waits.
  void SetOldestWait(Key pool, int64_t since_us);
  // The sibling whose client of `pool` has waited longest, and since when; nullopt when no
  // sibling waits.
  struct Waiter {
    uint32_t worker;
    int64_t since_us;
  };
  std::optional<Waiter> OldestWaitingSibling(Key pool) const;

  // The pod's lease with pgfleet-controller (docs/architecture.md, "Connection budget"): the
  // share of each database the pod holds, written by the pod's lease holder and enforced by
  // every worker. Kept here, not in the holder, so that the workers fall back to the floors on
  // their own if the holder dies, and a restarted holder rejoins with what the pod holds.
  struct Share {
    int cap = 0;  // 0: nothing granted (zero-filled: a new pod may open nothing)
    int floor = 0;
  };
  void PublishShare(Key database, Share share);
  Share ShareOf(Key database) const;
  // When the lease was last renewed (monotonic microseconds; 0 = never) and its timings.
  struct LeaseTimes {
    int64_t start_us = 0;
    int64_t timeout_us = 0;
    int64_t forget_after_us = 0;
  };
  void PublishLeaseTimes(const LeaseTimes& times);
  LeaseTimes lease_times() const;
  // What a worker enforces for `database` at `now_us`, timed as LeaseState times the lease: the
  // share's cap while the lease holds (3/4 of lease_timeout after its start), then the floor, and
  // nothing once the controller has forgotten the pod. Busy servers over it close as their
  // transactions end, never under a running one: the controller keeps a lost pod's room counted
  // until PostgreSQL no longer lists its backends.
  struct Enforced {
    int cap = 0;
  };
  Enforced EnforcedShare(Key database, int64_t now_us) const;
  // Claims the closing of one server of `key` while the pod holds more than `cap`: false when
  // the servers already claimed by this or other workers bring it down to `cap`. A claim ends
  // with EndShed once the server is closed (and released). Two workers racing may close one more
  // than needed, never fewer.
  [[nodiscard]] bool ClaimShed(Key key, int cap);
  void EndShed(Key key);
  // This worker's demand for a pool (servers in use + clients waiting), and the pod's sum.
  void SetDemand(Key pool, int demand);
  int DemandTotal(Key pool) const;
  // The names of every database key in the table ("d<name>").
  std::vector<std::string> DatabaseNames() const;
  // Every pool in the table, with its key.
  struct PoolName {
    std::string database;
    std::string user;
    Key key = 0;
  };
  std::vector<PoolName> PoolNames() const;

  // PAUSE and KILL in force in the pod (`database` empty: every database), recorded by the
  // workers that apply them, so that a worker that starts or restarts while they are in force
  // starts paused (pool/pause_state.h).
  void RecordPause(std::string_view database, bool paused);
  struct Paused {
    bool all = false;
    std::vector<std::string> databases;
  };
  Paused RecordedPauses() const;

  // The pod's schema epoch for shared prepared statements (pool::StatementRegistry): kept in the
  // pod's region, so that DDL any worker sees makes every worker's next Parse analysed afresh.
  std::atomic<uint64_t>* statement_epoch();

 private:
  struct Slot;
  struct Region;
  static Region* Map(int fd);
  // Scans stop at the highest worker id that ever attached.
  uint32_t WorkerLimit() const;

  Region* region_ = nullptr;
  bool shared_ = false;
  uint32_t worker_ = 1;
};

}  // namespace pgfleet::budget
