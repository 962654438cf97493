// The controller's bookkeeping, pure (no I/O, no clock, no gRPC, no threads): which workers and
// pods are members, their peer ids and pod blocks, their leases (expiry after lease_timeout of
// silence, forgetting after forget_after), the recovery of a restarted controller, and the
// BudgetAllocator that turns it all into shares. ControllerService is the plumbing around it:
// streams, messages, logs and the timer that calls Tick() with the time.
//
// Peer ids: see controller_service.h. A pod's block is the same for all its workers and is never
// handed out while a live or remembered pod holds it; a restarted controller reuses blocks named
// in the workers' Hellos only after forget_after.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "peering/controller/budget_allocator.h"
#include "peering/controller/lease_state.h"

namespace pgfleet::peering::controller {

struct MembershipOptions {
  absl::Duration lease_timeout = absl::Seconds(15);
  absl::Duration forget_after = absl::Minutes(5);
  int min_share = 1;
  // A lost member's room (its lease ran out, or it left with servers open) is given to others
  // only as its backends go (docs/architecture.md, "Connection budget"). With `backends_checked`
  // (the controller's monitor asks PostgreSQL: BackendsListed), a backend whose pid the member
  // reported counts until PostgreSQL no longer lists it; without, until lost_room_hold after the
  // expiry. The rest of the room it held counts until lost_room_hold either way: it may have
  // opened servers the controller never heard of (a login under way, a report lost with a
  // network partition).
  absl::Duration lost_room_hold = absl::Seconds(35);
  bool backends_checked = false;
};

// A worker's Hello, without the wire format.
struct JoinRequest {
  std::string pod_id;
  uint32_t local_peer_id = 0;
  uint32_t peer_id = 0;  // the id it already mints with (a controller restart), or 0
  std::string address;
  std::string hostname;
  uint32_t pid = 0;
  std::vector<DatabaseReport> databases;   // what it holds
  std::vector<std::string> known_members;  // the last directory it saw
  std::vector<uint32_t> known_blocks;
  // A worker leasing its own budget, a worker of a pod (no budget), or a pod's budget lease (local
  // id 0: no peer id, not in the directory's pods).
  enum class Role { kWorker, kWorkerOfPod, kPod };
  Role role = Role::kWorker;
};

class Membership {
 public:
  struct Member {
    uint32_t handle = 0;  // the allocator's id
    std::string key;      // "<pod_id>/<local>", "<pod_id>/pod" for a pod's lease
    std::string pod_id;
    uint32_t local = 0;
    uint32_t peer_id = 0;
    std::string address;
    std::string hostname;
    uint32_t pid = 0;
    bool connected = false;  // a stream is open (false while detached)
    absl::Time last_heard;
    uint64_t newest_report_seq = 0;
    bool expired = false;
    bool budget = true;                    // the allocator counts it (not a worker of a pod)
    std::map<std::string, int> open;       // last reported, per database
    std::map<std::string, int> sent_caps;  // last cap granted, per database
    std::map<std::string, std::vector<uint32_t>> backends;  // last reported pids, per database
    // While lost (expired, and not all of its room is back): since when, and how many of its
    // reported backends PostgreSQL listed at the last check, per database.
    absl::Time expired_at;
    std::map<std::string, int> held_at_loss;
    std::map<std::string, int> listed;
    bool lost_settled = false;
  };
  struct Pod {
    uint32_t block = 0;
    std::string address;
    std::set<std::string> members;  // member keys
  };

  explicit Membership(MembershipOptions options);

  // The controller starts serving at `now`: it is recovering (raises nothing) until every member
  // named in the Hellos has rejoined or lease_timeout has passed.
  void Start(absl::Time now);

  // The Hello is well-formed: a pod id, a local id in range, and a peer id (if any) whose local
  // part is that local id.
  static bool IsValid(const JoinRequest& hello);

  struct Joined {
    std::string key;
    uint32_t peer_id = 0;
    uint32_t block = 0;  // 0 = no block was free: its keys name no pod
    bool rejoin = false;
    bool reclaimed = false;       // it kept the id it already minted with
    std::string conflict_holder;  // another pod already holds the block it reclaimed
  };
  // A worker joins or rejoins on a new stream. nullopt: the Hello is malformed (no pod id, a local
  // id out of range, a peer id whose local part differs); the caller closes the stream. A
  // previous stream of the same member is the caller's to close.
  std::optional<Joined> Join(const JoinRequest& hello, absl::Time now);
  // A report renews the member's lease. False when its lease had already expired: it must
  // rejoin, and the caller closes its stream.
  [[nodiscard]] bool Report(const std::string& key, uint64_t report_seq,
                            const std::vector<DatabaseReport>& databases, absl::Time now);
  // The member is under the caps of grant `grant_seq`. False (ignored) when it has expired.
  bool Ack(const std::string& key, uint64_t grant_seq,
           const std::vector<DatabaseReport>& databases);
  // The member leaves. True when it is gone (it had nothing open); false when it still holds
  // servers, so it counts at its floor as if its lease had expired.
  bool Leave(const std::string& key, const std::vector<DatabaseReport>& databases, absl::Time now);
  // Its stream ended: it keeps what it holds (fail-static) until it rejoins or expires.
  void Detach(const std::string& key);

  struct Expired {
    std::string key;
    uint32_t peer_id = 0;
    absl::Duration silent;
  };
  struct TickOutcome {
    std::vector<Expired> expired;        // leases that ran out now: close their streams
    std::vector<std::string> forgotten;  // members removed now
    bool recovery_done = false;          // recovery ended at this tick
  };
  // Times leases and recovery.
  TickOutcome Tick(absl::Time now);

  struct Grant {
    std::string key;
    uint64_t grant_seq = 0;
    uint64_t report_seq = 0;  // the member's newest report: the grant renews up to it
    std::vector<ShareUpdate> shares;
    int raises = 0;  // shares above the cap last sent
    int lowers = 0;
  };
  // The reported backend pids of every lost member whose room is not all back yet, each with when
  // its member was last heard from: what the controller's monitor asks PostgreSQL about.
  struct LostBackend {
    uint32_t pid = 0;
    absl::Time last_heard;
  };
  std::vector<LostBackend> LostBackends() const;
  // PostgreSQL was asked about `asked` (LostBackends' pids) and lists `listed` of them now: the
  // room of the others goes back. A member whose pids were not all asked about waits for the next.
  // Returns how many reported backends were seen gone now.
  int BackendsListed(const std::vector<uint32_t>& asked, const std::set<uint32_t>& listed,
                     absl::Time now);

  // The allocator's grants for connected members, each remembered as sent.
  std::vector<Grant> Rebalance(absl::Time now);

  const Member* Find(const std::string& key) const;
  const std::map<std::string, Member>& members() const { return members_; }
  const std::map<std::string, Pod>& pods() const { return pods_; }
  bool recovering() const { return recovering_; }
  size_t awaited() const { return awaited_.size(); }
  absl::Time started() const { return started_; }
  BudgetAllocator& allocator() { return allocator_; }
  const BudgetAllocator& allocator() const { return allocator_; }

 private:
  void Remove(const std::string& key, absl::Time now);
  // What a Hello, Report, Ack or Leave says the member has open, and the backends' pids.
  static void Remember(Member& member, const std::vector<DatabaseReport>& databases);
  // Lost, and not all of its room back yet: its reported backends are still asked about.
  static bool AwaitsBackends(const Member& member);
  // The member's lease ran out, or it left with servers open.
  void Lose(Member& member, absl::Time now);
  // Tells the allocator how much of a lost member's room may still be in use.
  void UpdateLost(Member& member, absl::Time now);
  // The pod's block: its current one, else the claimed one, else a free one (0 when none is
  // left). `conflict` gets the pod already holding a claimed block.
  uint32_t BlockFor(const std::string& pod_id, uint32_t claimed_block, absl::Time now,
                    std::string* conflict);

  MembershipOptions options_;
  BudgetAllocator allocator_;
  std::map<std::string, Member> members_;        // by member key
  std::map<std::string, Pod> pods_;              // by pod id
  std::map<uint32_t, std::string> blocks_;       // block -> pod id
  std::map<uint32_t, absl::Time> freed_blocks_;  // block -> when it was freed (reused last)
  std::set<uint32_t> reported_blocks_;           // blocks named in Hellos' member lists (recovery)
  uint32_t next_handle_ = 1;
  absl::Time started_;
  bool recovering_ = true;
  std::set<std::string> awaited_;  // members named by others that have not rejoined
  bool heard_membership_ = false;  // some Hello named the previous members
};

}  // namespace pgfleet::peering::controller
