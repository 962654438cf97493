// The SHOW commands: each fills a ResultSet from every worker's stats (own first), summing over
// workers where PgBouncer shows one row per pool or database, and adding a `worker` column where
// rows are per connection or per worker. Column names and meanings follow PgBouncer's (1.23)
// where the concept is the same, so tools that parse SHOW output keep working. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pgfleet/peering/v1/peering.pb.h"
#include "pooler/admin/result_set.h"
#include "pooler/config/config.h"

namespace pgfleet::admin {

struct ShowInput {
  // Every worker that answered (own first); `failed` lists the others as (peer id, error).
  std::vector<peering::v1::WorkerStats> workers;
  std::vector<std::pair<uint32_t, std::string>> failed;
  const config::Config* fleet = nullptr;  // the fleet-wide config (before the per-worker split)
  std::string version;
  uint32_t own_peer_id = 0;
};

// Each database host as the workers know it, the newest report of each (database, host, port)
// winning: a promotion one worker saw is the pod's news.
using HostKey = std::tuple<std::string, std::string, uint32_t>;
std::map<HostKey, peering::v1::HostStatus> LatestHosts(const ShowInput& in);
// "role, up|down" for a host, as SHOW SERVERS and SHOW DATABASES print it.
std::string DescribeHost(const peering::v1::HostStatus& host);

void ShowPools(const ShowInput& in, ResultSet* out);
void ShowStats(const ShowInput& in, ResultSet* out);  // totals and averages
void ShowStatsTotals(const ShowInput& in, ResultSet* out);
void ShowTotals(const ShowInput& in, ResultSet* out);
void ShowStatsAverages(const ShowInput& in, ResultSet* out);
void ShowClients(const ShowInput& in, ResultSet* out);
void ShowServers(const ShowInput& in, ResultSet* out);
void ShowDatabases(const ShowInput& in, ResultSet* out);
void ShowUsers(const ShowInput& in, ResultSet* out);
void ShowConfig(const config::Config& fleet, ResultSet* out);
void ShowLists(const ShowInput& in, ResultSet* out);
void ShowMem(const ShowInput& in, ResultSet* out);
void ShowVersion(const std::string& version, ResultSet* out);
// PgBouncer's SHOW STATE: active, paused and suspended, yes or no.
void ShowState(bool paused, ResultSet* out);
void ShowWorkers(const ShowInput& in, ResultSet* out);
void ShowPeers(const ShowInput& in, ResultSet* out);
void ShowFleet(const ShowInput& in, ResultSet* out);

// The pod total of every worker's stats (pools summed by (database, user)).
peering::v1::WorkerStats PodTotal(const ShowInput& in);
// PgBouncer's timestamp format for SHOW CLIENTS/SERVERS ("2024-05-01 12:00:00 UTC").
std::string FormatUnixMs(int64_t unix_ms);

}  // namespace pgfleet::admin
