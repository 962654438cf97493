// SHOW POOLS and the pod totals the other SHOW commands build on.
#include <algorithm>
#include <tuple>

#include "absl/time/time.h"
#include "pooler/admin/show.h"
#include "pooler/metrics/aggregate.h"

namespace pgfleet::admin {

using Type = ResultSet::Type;

peering::v1::WorkerStats PodTotal(const ShowInput& in) {
  peering::v1::WorkerStats total;
  for (const auto& w : in.workers) {
    metrics::AddWorkerStats(w, metrics::AddMode::kEverything, &total);
  }
  std::sort(total.mutable_pools()->begin(), total.mutable_pools()->end(),
            [](const auto& a, const auto& b) {
              return std::tie(a.database(), a.user()) < std::tie(b.database(), b.user());
            });
  return total;
}

std::string FormatUnixMs(int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

void ShowPools(const ShowInput& in, ResultSet* out) {
  for (const char* c : {"database", "user"}) out->AddColumn(c);
  for (const char* c : {"cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req",
                        "sv_active", "sv_active_cancel", "sv_being_canceled", "sv_idle", "sv_used",
                        "sv_tested", "sv_login", "maxwait", "maxwait_us"}) {
    out->AddColumn(c, Type::kInt);
  }
  out->AddColumn("pool_mode");
  // After PgBouncer's columns: idle servers this pool gave to sibling workers and took from them
  // (one pool per pod).
  // And servers pinned to clients by session state (transaction pooling), clients listening
  // through the LISTEN hub and the servers it holds.
  for (const char* c :
       {"sv_handed_over", "sv_adopted", "sv_pinned", "cl_listening", "sv_listening"}) {
    out->AddColumn(c, Type::kInt);
  }
  const auto total = PodTotal(in);
  for (const auto& p : total.pools()) {
    // PgBouncer's cl_active is every logged-in client not waiting (linked or idle).
    out->AddRow({p.database(),
                 p.user(),
                 std::to_string(p.client_active() + p.client_idle()),
                 std::to_string(p.client_waiting() + p.client_welcome()),
                 "0",
                 "0",
                 std::to_string(p.server_active()),
                 std::to_string(p.server_active_cancel()),
                 std::to_string(p.server_being_canceled()),
                 std::to_string(p.server_idle()),
                 std::to_string(p.server_used()),
                 std::to_string(p.server_tested() - p.server_being_canceled()),
                 std::to_string(p.server_login()),
                 std::to_string(p.max_wait_us() / 1000000),
                 std::to_string(p.max_wait_us() % 1000000),
                 p.pool_mode(),
                 std::to_string(p.servers_handed_over()),
                 std::to_string(p.servers_adopted()),
                 std::to_string(p.server_pinned()),
                 std::to_string(p.client_listening()),
                 std::to_string(p.server_listening())});
  }
}

}  // namespace pgfleet::admin
