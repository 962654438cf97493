// The pod's server counts in shared memory.
#include "pooler/budget/pod_server_counts.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "pooler/base/strings.h"

namespace pgfleet::budget {

namespace {
constexpr uint32_t kEmpty = 0;
constexpr uint32_t kWriting = 1;  // a worker is writing the key text
constexpr uint32_t kReady = 2;

// Where a key's probe starts. Every process must agree, so not absl::Hash (seeded per process):
// FNV-1a, which is enough for a table of a few thousand names.
uint64_t StableHash(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}
}  // namespace

struct PodServerCounts::Slot {
  std::atomic<uint32_t> state;
  uint32_t length;
  char text[kMaxKeyLength];
  std::atomic<int32_t> total;
  // Sums of the per-worker idle and waiting counts: one load tells whether any worker has one,
  // so the common case (nobody waits) costs no scan of the workers.
  std::atomic<int32_t> idle_total;
  std::atomic<int32_t> waiting_total;
  // The pod's lease, for database keys.
  std::atomic<int32_t> share_cap;
  std::atomic<int32_t> share_floor;
  std::atomic<int32_t> shedding;  // servers being closed to get under the share
  std::atomic<int32_t> paused;    // database keys: PAUSE or KILL is in force (pause_state.h)
};

// Which layout a region has: bumped on any change to Region or Slot. During a rolling restart
// after an upgrade, workers of the new build attach to the region the running supervisor made
// with the old one; they must refuse it, not misread it or fault past its end.
constexpr uint64_t kLayout = 0x7067'666c'0000'0005;  // "pgfl", version 5

struct PodServerCounts::Region {
  std::atomic<uint64_t> layout;      // kLayout, written by CreateSharedRegion
  std::atomic<uint32_t> max_worker;  // the highest worker id that attached (bounds scans)
  std::atomic<int64_t> lease_start_us;
  std::atomic<int64_t> lease_timeout_us;
  std::atomic<int64_t> lease_forget_after_us;
  std::atomic<uint64_t> statement_epoch;
  std::atomic<int32_t> paused_all;  // PAUSE without a database name is in force
  Slot slots[kKeys];
  std::atomic<int32_t> open[kWorkers][kKeys];
  std::atomic<int32_t> idle[kWorkers][kKeys];
  std::atomic<int32_t> waiting[kWorkers][kKeys];
  std::atomic<int64_t> oldest_wait[kWorkers][kKeys];
  std::atomic<int32_t> demand[kWorkers][kKeys];
  std::atomic<uint64_t> backends[kBackendSlots];  // BackendRecord, 0 = free
  std::atomic<uint64_t> backends_recorded;
};

namespace {
// One server's backend in one word: pid (32 bits), database key (16), owning worker (8), and a
// bit that makes a record never 0.
constexpr uint64_t kBackendUsed = uint64_t{1} << 63;
uint64_t BackendRecord(uint32_t pid, uint32_t database, uint32_t worker) {
  return kBackendUsed | (uint64_t{worker & 0xff} << 48) | (uint64_t{database & 0xffff} << 32) | pid;
}
uint32_t RecordPid(uint64_t record) { return static_cast<uint32_t>(record); }
uint32_t RecordDatabase(uint64_t record) { return static_cast<uint32_t>(record >> 32) & 0xffff; }
uint32_t RecordWorker(uint64_t record) { return static_cast<uint32_t>(record >> 48) & 0xff; }
}  // namespace

PodServerCounts::Region* PodServerCounts::Map(int fd) {
  void* p = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Region*>(p);
}

absl::StatusOr<int> PodServerCounts::CreateSharedRegion() {
  int fd = memfd_create("pgfleet-servers", 0);  // no CLOEXEC: workers inherit it
  if (fd < 0) return absl::InternalError(base::StrCat("memfd_create: ", strerror(errno)));
  if (ftruncate(fd, sizeof(Region)) != 0) {
    close(fd);
    return absl::InternalError(base::StrCat("ftruncate: ", strerror(errno)));
  }
  Region* region = Map(fd);
  if (region == nullptr) {
    close(fd);
    return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  }
  region->layout.store(kLayout);
  munmap(region, sizeof(Region));
  return fd;  // otherwise zero-filled: every slot empty, every count 0
}

void PodServerCounts::ReleaseWorker(int region_fd, uint32_t worker) {
  ReleaseHeld(region_fd, DetachWorker(region_fd, worker));
}

PodServerCounts::HeldServers PodServerCounts::DetachWorker(int region_fd, uint32_t worker) {
  HeldServers held;
  Region* region = Map(region_fd);
  if (region == nullptr) return held;
  worker %= kWorkers;
  for (uint32_t key = 0; key < kKeys; ++key) {
    const int32_t open = region->open[worker][key].exchange(0);
    if (open != 0) held.open.emplace_back(key, open);
    const int32_t idle = region->idle[worker][key].exchange(0);
    if (idle != 0) region->slots[key].idle_total.fetch_sub(idle);
    region->oldest_wait[worker][key].store(0);
    const int32_t waiting = region->waiting[worker][key].exchange(0);
    if (waiting != 0) region->slots[key].waiting_total.fetch_sub(waiting);
    region->demand[worker][key].store(0);
  }
  // Its backends stay listed while its servers are held: PostgreSQL may still run them.
  for (uint32_t slot = 0; slot < kBackendSlots; ++slot) {
    const uint64_t record = region->backends[slot].load();
    if (record != 0 && RecordWorker(record) == worker) held.backends.emplace_back(slot, record);
  }
  munmap(region, sizeof(Region));
  return held;
}

void PodServerCounts::ReleaseHeld(int region_fd, const HeldServers& held) {
  if (held.open.empty() && held.backends.empty()) return;
  Region* region = Map(region_fd);
  if (region == nullptr) return;
  for (const auto& [key, open] : held.open) region->slots[key].total.fetch_sub(open);
  for (auto [slot, record] : held.backends) {
    // Unless the slot was freed and taken again since (a worker restarted in its place).
    region->backends[slot].compare_exchange_strong(record, 0);
  }
  munmap(region, sizeof(Region));
}

PodServerCounts::PodServerCounts() {
  // Anonymous and zero-filled, like a fresh memfd; pages are touched only as keys are used.
  void* p =
      mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  region_ = p == MAP_FAILED ? nullptr : static_cast<Region*>(p);
}

PodServerCounts::~PodServerCounts() {
  if (region_ != nullptr) munmap(region_, sizeof(Region));
}

absl::Status PodServerCounts::AttachShared(int region_fd, uint32_t worker) {
  struct stat st;
  if (fstat(region_fd, &st) != 0) {
    return absl::InternalError(base::StrCat("fstat: ", strerror(errno)));
  }
  const auto other_build = [&](std::string_view what) {
    return absl::FailedPreconditionError(base::StrCat(
        "the pod's shared server counts were made by another pgfleet build (", what,
        "): a rolling restart cannot change their layout; restart the whole pod (the supervisor) "
        "to run this build"));
  };
  if (static_cast<size_t>(st.st_size) != sizeof(Region)) {
    return other_build(base::StrCat(st.st_size, " bytes, this build uses ", sizeof(Region)));
  }
  Region* shared = Map(region_fd);
  if (shared == nullptr) return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  if (shared->layout.load() != kLayout) {
    munmap(shared, sizeof(Region));
    return other_build("layout version differs");
  }
  if (region_ != nullptr) munmap(region_, sizeof(Region));
  region_ = shared;
  shared_ = true;
  worker_ = worker % kWorkers;
  uint32_t seen = region_->max_worker.load();
  while (seen < worker_ && !region_->max_worker.compare_exchange_weak(seen, worker_)) {
  }
  return absl::OkStatus();
}

std::string PodServerCounts::PoolKeyText(std::string_view database, std::string_view user) {
  // Length-prefixed: a client may put any byte but NUL in a name, so no separator is safe.
  return base::StrCat("p", database.size(), ":", database, user);
}

std::string PodServerCounts::PinKeyText(std::string_view database, std::string_view user) {
  return base::StrCat("n", database.size(), ":", database, user);
}

std::string PodServerCounts::DatabaseClientsKeyText(std::string_view database) {
  return base::StrCat("cd", database);
}

std::string PodServerCounts::UserClientsKeyText(std::string_view user) {
  return base::StrCat("cu", user);
}

std::string PodServerCounts::DatabaseKeyText(std::string_view database) {
  return base::StrCat("d", database);
}

std::string PodServerCounts::UserKeyText(std::string_view user) { return base::StrCat("u", user); }

std::optional<PodServerCounts::Key> PodServerCounts::Intern(std::string_view text) {
  if (region_ == nullptr || text.empty() || text.size() > kMaxKeyLength) return std::nullopt;
  const size_t start = StableHash(text) % kKeys;
  for (size_t probe = 0; probe < kKeys; ++probe) {
    const Key key = static_cast<Key>((start + probe) % kKeys);
    Slot& slot = region_->slots[key];
    uint32_t state = slot.state.load(std::memory_order_acquire);
    if (state == kEmpty) {
      uint32_t expected = kEmpty;
      if (slot.state.compare_exchange_strong(expected, kWriting, std::memory_order_acq_rel)) {
        slot.length = static_cast<uint32_t>(text.size());
        std::memcpy(slot.text, text.data(), text.size());
        slot.state.store(kReady, std::memory_order_release);
        return key;
      }
      state = expected;
    }
    // Another worker is writing this slot's text: it takes microseconds, no I/O.
    while (state == kWriting) {
      sched_yield();
      state = slot.state.load(std::memory_order_acquire);
    }
    if (std::string_view(slot.text, slot.length) == text) return key;
  }
  return std::nullopt;
}

bool PodServerCounts::TryReserve(std::initializer_list<Limited> limits) {
  const Limited* taken_end = limits.begin();
  for (const Limited& limited : limits) {
    std::atomic<int32_t>& total = region_->slots[limited.key].total;
    int32_t current = total.load();
    bool taken = false;
    while (limited.limit >= 0 && (limited.limit == 0 || current < limited.limit)) {
      if (total.compare_exchange_weak(current, current + 1)) {
        taken = true;
        break;
      }
    }
    if (!taken) {
      // All or none: give back what this call took.
      for (const Limited* undo = limits.begin(); undo != taken_end; ++undo) {
        region_->slots[undo->key].total.fetch_sub(1);
      }
      return false;
    }
    ++taken_end;
  }
  for (const Limited& limited : limits) region_->open[worker_][limited.key].fetch_add(1);
  return true;
}

void PodServerCounts::Release(std::initializer_list<Key> keys) {
  for (Key key : keys) {
    region_->open[worker_][key].fetch_sub(1);
    region_->slots[key].total.fetch_sub(1);
  }
}

void PodServerCounts::Transfer(std::initializer_list<Key> keys, uint32_t from, uint32_t to) {
  from %= kWorkers;
  to %= kWorkers;
  for (Key key : keys) {
    region_->open[to][key].fetch_add(1);
    region_->open[from][key].fetch_sub(1);
  }
}

int PodServerCounts::RecordBackend(Key database, uint32_t pid) {
  const uint64_t record = BackendRecord(pid, database, worker_);
  // Start where the pid points, so workers recording at once rarely race for one slot.
  for (uint32_t probe = 0; probe < kBackendSlots; ++probe) {
    const uint32_t slot = (pid + probe) % kBackendSlots;
    uint64_t expected = 0;
    if (region_->backends[slot].load(std::memory_order_relaxed) == 0 &&
        region_->backends[slot].compare_exchange_strong(expected, record)) {
      region_->backends_recorded.fetch_add(1, std::memory_order_relaxed);
      return static_cast<int>(slot);
    }
  }
  return -1;
}

void PodServerCounts::ForgetBackend(int slot) {
  if (slot >= 0) region_->backends[slot].store(0);
}

void PodServerCounts::MoveBackend(int slot, uint32_t to) {
  if (slot < 0) return;
  const uint64_t record = region_->backends[slot].load();
  if (record == 0) return;
  region_->backends[slot].store(BackendRecord(RecordPid(record), RecordDatabase(record), to));
}

int PodServerCounts::FindBackend(uint32_t pid) const {
  for (uint32_t probe = 0; probe < kBackendSlots; ++probe) {
    const uint32_t slot = (pid + probe) % kBackendSlots;
    const uint64_t record = region_->backends[slot].load();
    if (record != 0 && RecordPid(record) == pid) return static_cast<int>(slot);
  }
  return -1;
}

uint64_t PodServerCounts::backends_recorded() const {
  return region_->backends_recorded.load(std::memory_order_relaxed);
}

std::vector<uint32_t> PodServerCounts::BackendPids(Key database) const {
  std::vector<uint32_t> pids;
  for (const auto& slot : region_->backends) {
    const uint64_t record = slot.load(std::memory_order_relaxed);
    if (record != 0 && RecordDatabase(record) == database) pids.push_back(RecordPid(record));
  }
  return pids;
}

int PodServerCounts::Total(Key key) const { return region_->slots[key].total.load(); }
int PodServerCounts::Mine(Key key) const { return region_->open[worker_][key].load(); }

void PodServerCounts::AddIdle(Key pool, int delta) {
  region_->idle[worker_][pool].fetch_add(delta);
  region_->slots[pool].idle_total.fetch_add(delta);
}

void PodServerCounts::AddWaiting(Key pool, int delta) {
  region_->waiting[worker_][pool].fetch_add(delta);
  region_->slots[pool].waiting_total.fetch_add(delta);
}

void PodServerCounts::SetOldestWait(Key pool, int64_t since_us) {
  region_->oldest_wait[worker_][pool].store(since_us, std::memory_order_relaxed);
}

std::optional<PodServerCounts::Waiter> PodServerCounts::OldestWaitingSibling(Key pool) const {
  if (!shared_) return std::nullopt;
  std::optional<Waiter> oldest;
  const uint32_t limit = WorkerLimit();
  for (uint32_t worker = 1; worker <= limit; ++worker) {
    if (worker == worker_) continue;
    if (region_->waiting[worker][pool].load(std::memory_order_relaxed) <= 0) continue;
    const int64_t since = region_->oldest_wait[worker][pool].load(std::memory_order_relaxed);
    if (since > 0 && (!oldest.has_value() || since < oldest->since_us)) oldest = {worker, since};
  }
  return oldest;
}

uint32_t PodServerCounts::WorkerLimit() const {
  return std::min(kWorkers - 1, region_->max_worker.load(std::memory_order_relaxed));
}

int PodServerCounts::WaitingTotal(Key pool) const {
  return region_->slots[pool].waiting_total.load(std::memory_order_relaxed);
}

std::optional<uint32_t> PodServerCounts::SiblingWithIdle(Key pool) const {
  // One load in the common case: nobody but this worker has an idle server.
  if (!shared_ || region_->slots[pool].idle_total.load(std::memory_order_relaxed) <=
                      region_->idle[worker_][pool].load(std::memory_order_relaxed)) {
    return std::nullopt;
  }
  std::optional<uint32_t> best;
  int32_t most = 0;
  const uint32_t limit = WorkerLimit();
  for (uint32_t worker = 1; worker <= limit; ++worker) {
    if (worker == worker_) continue;
    const int32_t n = region_->idle[worker][pool].load(std::memory_order_relaxed);
    if (n > most) {
      most = n;
      best = worker;
    }
  }
  return best;
}

void PodServerCounts::PublishShare(Key database, Share share) {
  region_->slots[database].share_floor.store(share.floor);
  region_->slots[database].share_cap.store(share.cap);
}

PodServerCounts::Share PodServerCounts::ShareOf(Key database) const {
  return {region_->slots[database].share_cap.load(), region_->slots[database].share_floor.load()};
}

void PodServerCounts::PublishLeaseTimes(const LeaseTimes& times) {
  region_->lease_timeout_us.store(times.timeout_us);
  region_->lease_forget_after_us.store(times.forget_after_us);
  region_->lease_start_us.store(times.start_us);
}

PodServerCounts::LeaseTimes PodServerCounts::lease_times() const {
  return {region_->lease_start_us.load(), region_->lease_timeout_us.load(),
          region_->lease_forget_after_us.load()};
}

PodServerCounts::Enforced PodServerCounts::EnforcedShare(Key database, int64_t now_us) const {
  const Share share = ShareOf(database);
  Enforced out{share.cap};
  const LeaseTimes times = lease_times();
  if (times.start_us == 0 || times.timeout_us <= 0) return out;
  if (now_us >= times.start_us + times.timeout_us * 3 / 4) out.cap = std::min(out.cap, share.floor);
  if (now_us >= times.start_us + times.forget_after_us - times.timeout_us) out.cap = 0;
  return out;
}

bool PodServerCounts::ClaimShed(Key key, int cap) {
  std::atomic<int32_t>& shedding = region_->slots[key].shedding;
  int32_t claimed = shedding.load();
  while (region_->slots[key].total.load() - claimed > std::max(cap, 0)) {
    if (shedding.compare_exchange_weak(claimed, claimed + 1)) return true;
  }
  return false;
}

void PodServerCounts::EndShed(Key key) { region_->slots[key].shedding.fetch_sub(1); }

void PodServerCounts::SetDemand(Key pool, int demand) {
  region_->demand[worker_][pool].store(demand, std::memory_order_relaxed);
}

int PodServerCounts::DemandTotal(Key pool) const {
  int sum = 0;
  const uint32_t limit = WorkerLimit();
  for (uint32_t worker = 0; worker <= limit; ++worker) {
    sum += region_->demand[worker][pool].load(std::memory_order_relaxed);
  }
  return sum;
}

std::vector<PodServerCounts::PoolName> PodServerCounts::PoolNames() const {
  std::vector<PoolName> pools;
  for (Key key = 0; key < kKeys; ++key) {
    const Slot& slot = region_->slots[key];
    if (slot.state.load(std::memory_order_acquire) != kReady || slot.length == 0) continue;
    const std::string_view text(slot.text, slot.length);
    if (text[0] != 'p') continue;
    // "p<length of database>:<database><user>"
    const size_t colon = text.find(':');
    uint32_t length = 0;
    if (colon == std::string_view::npos ||
        !absl::SimpleAtoi(absl::string_view(text.data() + 1, colon - 1), &length) ||
        length > text.size() - colon - 1) {
      continue;
    }
    pools.push_back({std::string(text.substr(colon + 1, length)),
                     std::string(text.substr(colon + 1 + length)), key});
  }
  return pools;
}

std::vector<std::string> PodServerCounts::DatabaseNames() const {
  std::vector<std::string> names;
  for (const Slot& slot : region_->slots) {
    if (slot.state.load(std::memory_order_acquire) != kReady || slot.length == 0) continue;
    if (slot.text[0] == 'd') names.emplace_back(slot.text + 1, slot.length - 1);
  }
  return names;
}

std::atomic<uint64_t>* PodServerCounts::statement_epoch() {
  static std::atomic<uint64_t> unmapped{0};  // only when the region could not be mapped
  return region_ != nullptr ? &region_->statement_epoch : &unmapped;
}

void PodServerCounts::RecordPause(std::string_view database, bool paused) {
  if (region_ == nullptr) return;
  if (database.empty()) {
    region_->paused_all.store(paused ? 1 : 0);
    if (paused) return;
    // RESUME without a name resumes every database.
    for (Slot& slot : region_->slots) slot.paused.store(0);
    return;
  }
  if (auto key = Intern(DatabaseKeyText(database)); key.has_value()) {
    region_->slots[*key].paused.store(paused ? 1 : 0);
  }
}

PodServerCounts::Paused PodServerCounts::RecordedPauses() const {
  Paused out;
  if (region_ == nullptr) return out;
  out.all = region_->paused_all.load() != 0;
  for (const Slot& slot : region_->slots) {
    if (slot.state.load(std::memory_order_acquire) != kReady || slot.length == 0) continue;
    if (slot.text[0] == 'd' && slot.paused.load() != 0) {
      out.databases.emplace_back(slot.text + 1, slot.length - 1);
    }
  }
  return out;
}

}  // namespace pgfleet::budget
