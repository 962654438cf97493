// The pod's HTTP endpoint in the supervisor: /metrics (Prometheus text format, built on each
// scrape from the workers' latest snapshots in the SnapshotRegion), /healthz (the supervisor is
// alive) and /readyz (every worker slot is served by a ready worker and PostgreSQL is reachable).
// Served by civetweb threads; creates no gRPC object, so the supervisor may keep forking.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pgfleet/peering/v1/peering.pb.h"
#include "pooler/metrics/families.h"
#include "pooler/metrics/snapshot_region.h"

struct mg_context;
struct mg_connection;

namespace pgfleet::metrics {

struct ExporterOptions {
  std::string listen;  // host:port (metrics.listen)
  std::string version;
  int worker_count = 1;
  // Where PostgreSQL listens, probed by /readyz when no worker holds a logged-in server: host
  // (name, IP or unix socket directory) and port of each configured database.
  std::vector<std::pair<std::string, int>> postgres;
};

// A worker process as the supervisor sees it.
struct WorkerProcess {
  pid_t pid = 0;
  int slot = 0;               // worker slot
  uint32_t metrics_slot = 0;  // its slot in the SnapshotRegion
  bool serving = false;       // the supervisor counts it as the slot's active worker
};

// Whether the pod is ready, and why not; pure, for tests.
struct Readiness {
  bool ready = false;
  std::string reason;  // why not ready (empty when ready)
};
// `latest` holds each serving worker's latest snapshot by worker slot (missing = none yet). A
// snapshot older than kStaleAfter counts as a hung worker. PostgreSQL is reachable when some
// worker holds a logged-in server connection, else when `probe_postgres` says so.
inline constexpr absl::Duration kStaleAfter = absl::Seconds(5);
Readiness EvaluateReadiness(int worker_count, const std::map<int, peering::v1::WorkerStats>& latest,
                            absl::Time now, const std::function<bool()>& probe_postgres);

class Exporter {
 public:
  // Starts serving on options.listen. `region` must outlive the exporter.
  static absl::StatusOr<std::unique_ptr<Exporter>> Start(ExporterOptions options,
                                                         SnapshotRegion* region);
  ~Exporter();

  // The supervisor's view of its workers (loop thread; replaces the previous list).
  void SetProcesses(std::vector<WorkerProcess> processes);
  // A worker exited: its counters are kept for its slot (so they never go backwards) and its
  // metrics slot is cleared for reuse. Call before reusing `metrics_slot`.
  void OnProcessExited(int slot, uint32_t metrics_slot);
  void SetWorkerRestarts(uint64_t restarts);

  // The port it listens on.
  int port() const { return port_; }

  // What /metrics and /readyz answer (also for tests).
  std::string RenderMetrics();
  Readiness CheckReadiness();

 private:
  explicit Exporter(ExporterOptions options, SnapshotRegion* region)
      : options_(std::move(options)), region_(region) {}
  static int HandleMetrics(mg_connection* conn, void* self);
  static int HandleHealthz(mg_connection* conn, void* self);
  static int HandleReadyz(mg_connection* conn, void* self);
  // Latest snapshots of the serving processes by worker slot, and the pod view for /metrics.
  std::map<int, peering::v1::WorkerStats> LatestServing();
  PodView BuildView(Readiness readiness);
  bool ProbePostgres();

  ExporterOptions options_;
  SnapshotRegion* region_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;

  std::mutex mu_;  // guards everything below (loop thread vs civetweb threads)
  std::vector<WorkerProcess> processes_;
  std::map<int, peering::v1::WorkerStats> retired_;  // counters of exited processes, by slot
  uint64_t worker_restarts_ = 0;

  std::mutex probe_mu_;
  absl::Time probed_at_ = absl::InfinitePast();
  bool probe_ok_ = false;
};

}  // namespace pgfleet::metrics
