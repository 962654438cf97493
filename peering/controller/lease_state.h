// The worker's lease, pure (no I/O, no clock, no gRPC, no threads): what LeaseClient decides about
// its caps, floors, acks and reports, with the time passed in by the caller.
//
// Fail-static (docs/architecture.md, "Connection budget"): a worker that loses the controller keeps
// its caps and never raises them; when its lease has run 3/4 of lease_timeout past the newest
// report the controller acknowledged (timed from when the worker *sent* it, so the worker is always
// earlier than the controller), it falls back to its floors, closing idle servers at once and busy
// ones when released; at 9/10 it closes whatever is still over the floor. After forget_after it
// holds nothing, because the controller has forgotten it and reassigned its floor. A worker that
// never reached the controller holds nothing in budgeted databases.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "peering/controller/budget_allocator.h"

namespace pgfleet::peering::controller {

// What the lease needs from the worker's pools (PoolRegistry in production).
class CapTarget {
 public:
  virtual ~CapTarget() = default;
  struct Usage {
    std::string database;
    int budget = 0;  // the fleet budget from the config
    int open = 0;    // server connections open or opening now
    int demand = 0;  // servers in use + clients waiting now, at most what the pools could use
    std::vector<uint32_t> backend_pids;  // of the servers open, where known
  };
  // Every database with a fleet budget that this worker knows of.
  virtual std::vector<Usage> Usages() = 0;
  // The share in force: at most `cap` servers (0: none), `floor` kept when the lease runs out.
  virtual void SetCap(const std::string& database, int cap, int floor) = 0;
  // Brings the database toward its cap (see PoolRegistry::EnforceDatabaseCap); returns how many
  // servers were closed now.
  virtual int Enforce(const std::string& database) = 0;
};

// One database as the worker tells the controller (Hello, Report, Ack, Leave).
struct DatabaseReport {
  std::string database;
  int budget = 0;
  int cap = -1;  // -1 = never granted
  int floor = 0;
  int open = 0;
  int demand = 0;  // only in Hello and Report
  std::vector<uint32_t> backend_pids;
};

class LeaseState {
 public:
  // After closing servers to get under a lowered cap, the worker waits this long before it
  // acknowledges (or rejoins), so PostgreSQL has reaped the backends before the freed room is
  // granted elsewhere.
  static constexpr absl::Duration kSettle = absl::Milliseconds(50);

  LeaseState(absl::Duration lease_timeout, absl::Duration forget_after);

  // Starts pushing caps to `target` (every cap held so far at once). It must outlive this object.
  void Attach(CapTarget* target);
  // A restarted lease holder takes over what its predecessor held (the pod's shared counts keep
  // it): these shares, and a lease last renewed at `lease_start` that it must earn again before it
  // raises anything. Before Attach.
  void Restore(const std::map<std::string, ShareUpdate>& shares, absl::Time lease_start);

  // A new stream sent its Hello at `now`; nothing from an earlier stream counts from here on.
  void OnHelloSent(absl::Time now);
  // The stream ended: no acks or reports until the next Welcome.
  void OnStreamEnded();

  struct Welcome {
    uint32_t peer_id = 0;
    absl::Duration lease_timeout = absl::ZeroDuration();  // zero = keep ours
    absl::Duration forget_after = absl::ZeroDuration();
  };
  // The controller welcomed the stream. False (and nothing changes) when it names another peer
  // id than the one this worker already mints with: the caller drops the stream.
  [[nodiscard]] bool OnWelcome(const Welcome& welcome, absl::Time now);
  // The controller renewed the lease up to report `report_seq`. True when this regained a lease
  // that had been lost.
  bool OnRenewed(uint64_t report_seq, absl::Time now);
  // A grant: renews up to `report_seq`, then takes its shares and, with a lease, owes an ack for
  // `grant_seq`. Without a lease only lowers are taken; raises wait for the lease to be regained
  // on the same stream (OnRenewed), and are dropped with the stream. Returns what OnRenewed
  // returns. Tick() next.
  bool OnGrant(uint64_t grant_seq, uint64_t report_seq, const std::vector<ShareUpdate>& shares,
               absl::Time now);

  struct TickOutcome {
    // The lease ran out at this tick: the caps fell to the floors, and the stream (if it still
    // seems alive) cannot be trusted; the caller cancels it.
    bool lease_lost = false;
    // Databases whose share went to 0 because the controller has forgotten this worker.
    std::vector<std::string> forgotten;
    // The grant to acknowledge now, if any: send an Ack with Databases(false), then MarkAcked.
    std::optional<uint64_t> ack;
  };
  // Every few milliseconds, and after each grant: times the lease, enforces the caps on the
  // target (closing what is over them) and says whether an ack is due. `connected`: a stream is
  // open to send the ack on. Nothing happens before Attach.
  TickOutcome Tick(absl::Time now, bool connected);
  void MarkAcked(uint64_t grant_seq) { acked_ = grant_seq; }

  // The next report, numbered, with demand at its peak since the last one; nullopt when none is
  // due (no Welcome on this stream, or not attached).
  struct Report {
    uint64_t seq = 0;
    std::vector<DatabaseReport> databases;
  };
  std::optional<Report> NextReport(absl::Time now);
  // What the target has, with the shares held (empty before Attach).
  std::vector<DatabaseReport> Databases(bool with_demand) const;

  absl::Duration lease_timeout() const { return lease_timeout_; }
  absl::Duration forget_after() const { return forget_after_; }
  void set_peer_id(uint32_t peer_id) { peer_id_ = peer_id; }
  uint32_t peer_id() const { return peer_id_; }
  bool welcomed() const { return welcomed_; }
  bool has_lease() const { return has_lease_; }
  // Send time of the newest renewed report (InfinitePast = never).
  absl::Time lease_start() const { return lease_start_; }
  // When the worker last closed a server to get under a cap (InfinitePast = never).
  absl::Time last_close() const { return last_close_; }
  // The cap in force (absent = none granted yet, i.e. 0).
  int CapFor(const std::string& database) const;
  // -1 = never granted.
  int RawCapFor(const std::string& database) const;
  int FloorFor(const std::string& database) const;

 private:
  struct Share {
    int cap = -1;  // -1 = never granted (enforced as 0)
    int floor = 0;
  };

  // The controller still counts us live: 3/4 of a lease since the newest renewed report.
  bool LeaseValid(absl::Time now) const;
  void SetShare(const std::string& database, int cap, int floor);

  absl::Duration lease_timeout_;
  absl::Duration forget_after_;
  CapTarget* target_ = nullptr;
  uint32_t peer_id_ = 0;
  bool welcomed_ = false;  // the current stream got its Welcome
  bool has_lease_ = false;
  absl::Time hello_sent_at_ = absl::InfinitePast();
  absl::Time lease_start_ = absl::InfinitePast();
  uint64_t report_seq_ = 0;
  std::map<uint64_t, absl::Time> report_sent_at_;
  std::map<std::string, Share> shares_;
  std::map<std::string, int> peak_demand_;
  std::map<std::string, int> last_open_;
  uint64_t pending_ack_ = 0;
  uint64_t acked_ = 0;
  // Raises granted on this stream while it had no lease (a Welcome after a paused Hello), newest
  // per database, and the newest grant that carried one.
  std::map<std::string, ShareUpdate> deferred_raises_;
  uint64_t deferred_grant_seq_ = 0;
  absl::Time last_close_ = absl::InfinitePast();
};

}  // namespace pgfleet::peering::controller
