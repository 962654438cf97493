// The pod's budget lease.
#include "peering/pod_lease.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/random.h"
#include "pooler/base/status_macros.h"
#include "pooler/base/strings.h"
#include "pooler/net/signal_watcher.h"

namespace pgfleet::peering {

using budget::PodServerCounts;

namespace {
// How often the lease's times reach the counts: the workers fall back to the floors at most this
// much later than the holder would, and never earlier than the controller expects.
constexpr absl::Duration kPublishInterval = absl::Milliseconds(25);

int64_t ToMicros(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMicros(t); }
}  // namespace

std::vector<PodCapTarget::Usage> PodCapTarget::Usages() {
  // The databases the config budgets by name, and those the workers opened through "*".
  std::set<std::string> names;
  for (const auto& [name, db] : config_.databases) {
    if (name != "*" && db.max_db_connections > 0) names.insert(name);
  }
  for (auto& name : counts_->DatabaseNames()) names.insert(std::move(name));
  // Demand per database: per pool, what the pod's workers want together, at most what the pool
  // could use (its size and reserve hold for the pod).
  std::map<std::string, int> demand;
  for (const auto& pool : counts_->PoolNames()) {
    auto db = config_.FindDatabase(pool.database);
    if (!db.has_value() || db->max_db_connections <= 0) continue;
    demand[pool.database] += std::min(counts_->DemandTotal(pool.key),
                                      config_.EffectivePoolSize(*db, pool.user) +
                                          config_.EffectiveReservePoolSize(*db, pool.user));
  }
  std::vector<Usage> out;
  for (const auto& name : names) {
    auto db = config_.FindDatabase(name);
    if (!db.has_value() || db->max_db_connections <= 0) continue;
    auto key = counts_->Intern(PodServerCounts::DatabaseKeyText(name));
    if (!key.has_value()) continue;
    out.push_back(Usage{name, db->max_db_connections, counts_->Total(*key), demand[name],
                        counts_->BackendPids(*key)});
  }
  return out;
}

void PodCapTarget::SetCap(const std::string& database, int cap, int floor) {
  auto key = counts_->Intern(PodServerCounts::DatabaseKeyText(database));
  if (key.has_value()) counts_->PublishShare(*key, {cap, floor});
}

PodLease::PodLease(net::EventLoop& loop, const config::Config& config, FleetOptions options,
                   PeerCredentials credentials, budget::PodServerCounts* counts)
    : loop_(loop),
      options_(std::move(options)),
      credentials_(std::move(credentials)),
      counts_(counts),
      target_(counts, config) {}

PodLease::~PodLease() {
  if (publish_timer_ != 0) loop_.CancelTimer(publish_timer_);
  lease_.reset();
}

absl::StatusOr<std::unique_ptr<PodLease>> PodLease::Create(net::EventLoop& loop,
                                                           const config::Config& config,
                                                           const std::string& pod_id,
                                                           budget::PodServerCounts* counts) {
  ASSIGN_OR_RETURN(FleetOptions options, ParseFleetOptions(config));
  if (!options.controller.enabled()) {
    return absl::FailedPreconditionError("controller.address is not set");
  }
  ASSIGN_OR_RETURN(PeerCredentials credentials, PeerCredentials::Load(options.peering));
  auto lease = std::unique_ptr<PodLease>(
      new PodLease(loop, config, std::move(options), std::move(credentials), counts));
  controller::LeaseIdentity identity{pod_id, 0, "", controller::v1::LEASE_ROLE_POD};
  lease->lease_ = std::make_unique<controller::LeaseClient>(loop, lease->options_.controller,
                                                            lease->credentials_, identity);
  return lease;
}

void PodLease::Start() {
  const PodServerCounts::LeaseTimes times = counts_->lease_times();
  if (times.start_us != 0) {
    // A holder before this one had a lease: what it was granted is what the pod holds.
    std::map<std::string, controller::ShareUpdate> shares;
    for (const auto& name : counts_->DatabaseNames()) {
      auto key = counts_->Intern(PodServerCounts::DatabaseKeyText(name));
      if (!key.has_value()) continue;
      const PodServerCounts::Share share = counts_->ShareOf(*key);
      shares[name] = controller::ShareUpdate{name, share.cap, share.floor};
    }
    lease_->Restore(shares, absl::FromUnixMicros(times.start_us));
    PGFLEET_LOG(kInfo, "pod_lease_restored", "databases=", shares.size());
  }
  lease_->Attach(&target_, [](const controller::v1::Directory&) {});
  publish_timer_ = loop_.RunEvery(kPublishInterval, [this] {
    PublishTimes();
    // A server logged in since the last look: report its pid now (one load per tick).
    const uint64_t recorded = counts_->backends_recorded();
    if (recorded != backends_reported_) {
      backends_reported_ = recorded;
      lease_->ReportNow();
    }
  });
}

void PodLease::PublishTimes() {
  const controller::LeaseState& state = lease_->state();
  const int64_t start = ToMicros(state.lease_start());
  if (start == 0) return;  // never had a lease: nothing was granted either
  counts_->PublishLeaseTimes({start, absl::ToInt64Microseconds(state.lease_timeout()),
                              absl::ToInt64Microseconds(state.forget_after())});
}

void PodLease::Stop() {
  if (publish_timer_ != 0) {
    loop_.CancelTimer(publish_timer_);
    publish_timer_ = 0;
  }
  PublishTimes();
  for (const auto& usage : target_.Usages()) {
    if (usage.open > 0) {
      PGFLEET_LOG(kInfo, "pod_lease_kept", "db=", base::LogQuote(usage.database),
                  " open=", usage.open, " effect=\"the next holder rejoins with them\"");
      return;
    }
  }
  lease_->Leave(absl::Seconds(1));
}

int RunPodLeaseProcess(const std::string& config_path, const std::string& runtime_dir,
                       int pod_servers_fd) {
  base::SetLogPrefix("pod_lease");
  auto fail = [](std::string_view what, const absl::Status& status) {
    PGFLEET_LOG(kError, "startup_failed", "what=", what,
                " error=", base::LogQuote(base::Sv(status.message())));
    return 1;
  };
  net::EventLoop loop;
  if (auto status = loop.Init(); !status.ok()) return fail("loop", status);
  auto config = config::LoadConfigFile(config_path);
  if (!config.ok()) return fail("config", config.status());
  base::SetLogFile(config->log.file);
  PodServerCounts counts;
  if (pod_servers_fd >= 0) {
    // Worker id 0: it reserves nothing, and no worker has that id.
    if (auto status = counts.AttachShared(pod_servers_fd, 0); !status.ok()) {
      return fail("pod_servers", status);
    }
  }
  auto lease = PodLease::Create(loop, *config, PodIdFor(runtime_dir), &counts);
  if (!lease.ok()) return fail("lease", lease.status());
  net::SignalWatcher signals(loop, {SIGHUP, SIGTERM, SIGINT}, [&](int signo) {
    if (signo == SIGHUP) {
      auto reloaded = config::LoadConfigFile(config_path);
      if (reloaded.ok()) {
        base::SetLogFile(reloaded->log.file);  // reopened: log rotation
        (*lease)->UpdateConfig(*reloaded);
      } else {
        PGFLEET_LOG(kError, "reload_failed",
                    "error=", base::LogQuote(base::Sv(reloaded.status().message())));
      }
      return;
    }
    loop.Stop();
  });
  if (auto status = signals.Start(); !status.ok()) return fail("signals", status);
  (*lease)->Start();
  PGFLEET_LOG(kInfo, "pod_lease_serving", "pid=", getpid());
  if (auto status = loop.Run(); !status.ok()) return fail("loop", status);
  (*lease)->Stop();
  return 0;
}

std::string PodIdFor(const std::string& runtime_dir) {
  uint8_t bytes[12];
  base::SecureRandomBytes(bytes);
  std::string fresh = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  if (runtime_dir.empty()) return fresh;
  const std::string path = absl::StrCat(runtime_dir, "/pod-id");
  const std::string tmp = absl::StrCat(path, ".", getpid());
  // Write then link: the name appears complete or not at all, and only the first link wins.
  if (std::ofstream(tmp) << fresh) {
    if (link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
      unlink(tmp.c_str());
      return fresh;
    }
  }
  unlink(tmp.c_str());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string id = ss.str();
  absl::StripAsciiWhitespace(&id);
  return id.empty() ? fresh : id;
}

}  // namespace pgfleet::peering
