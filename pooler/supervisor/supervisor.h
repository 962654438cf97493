// The pod's supervisor: owns the listening sockets (one SO_REUSEPORT socket per worker slot,
// created once and inherited by whichever process serves the slot), fork+execs the workers,
// restarts the ones that die, forwards SIGHUP/SIGTERM/SIGINT, and rolls workers one at a time on
// SIGUSR2 or when the binary on disk changes. It creates no gRPC object: workers are exec'd fresh.
//
// Why a rolling restart loses no connection: closing a reuseport listener on Linux resets the
// connections queued in its backlog. Here no listener is ever closed while the pod runs. The
// replacement worker for slot i starts on the very socket the old worker accepts on (inherited
// from the supervisor), reports ready, and only then is the old worker told to drain: it stops
// polling the socket but keeps it open, so connections queued or arriving meanwhile are accepted
// by the replacement. net.ipv4.tcp_migrate_req is not needed (and is often not settable in pods).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pooler/config/config.h"
#include "pooler/metrics/exporter.h"
#include "pooler/metrics/snapshot_region.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/signal_watcher.h"
#include "pooler/supervisor/listen_guard.h"

namespace pgfleet::supervisor {

struct SupervisorOptions {
  std::string config_path;
  std::string binary_path;  // what to exec for workers (default: this binary)
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();

  [[nodiscard]] absl::Status Init();
  // Runs until every worker has exited after SIGTERM/SIGINT.
  [[nodiscard]] absl::Status Run();

  int worker_count() const { return worker_count_; }

  // Closes the listening sockets and removes the runtime directory (also done by the destructor).
  void ReleaseRuntimeFiles();
  // PgBouncer's pidfile: this process's pid, removed by ReleaseRuntimeFiles.
  absl::Status WritePidFile();
  // Closes the client listening sockets (shutdown, and with the runtime files at exit).
  void CloseListeners();

 private:
  enum class Role { kStarting, kActive, kDraining };
  struct Process {
    int slot = 0;
    uint32_t peer_id = 0;
    Role role = Role::kStarting;
    absl::Time started_at;
    int ready_fd = -1;
    int metrics_slot = -1;  // its slot in the metrics SnapshotRegion (-1 = none)
  };
  class ReadyWatcher;

  absl::Status CreateListeners();
  // Starts a worker for `slot`; returns its pid or -1.
  pid_t Spawn(int slot);
  // fork+exec of this binary with `args` (after argv[0]), keeping `inherit` open in the child.
  pid_t Exec(std::vector<std::string> args, const std::vector<int>& inherit);
  // With pgfleet-controller: the process that holds the pod's budget lease (peering/pod_lease.h),
  // restarted when it dies, stopped after the last worker.
  void SpawnPodLease();
  void OnPodLeaseExited(int status);
  // Every worker is gone (shutdown): the lease process goes last, then the loop stops.
  void FinishShutdown();
  uint32_t NextPeerId();
  void OnWorkerReady(pid_t pid);
  // Unregisters and deletes pid's ReadyWatcher once the event loop's current batch is done.
  void ForgetReadyWatcher(pid_t pid);
  // A dead worker's servers leave the pod's totals once PostgreSQL has ended their backends:
  // after twice pool.server_connection_check_interval plus 250 ms (at once when it is 0).
  void ReleaseServersOfDeadWorker(uint32_t peer_id);
  void OnChildExited(pid_t pid, int status);
  void ReapChildren();
  void ScheduleRestart(int slot);
  void BeginRollingRestart(std::string_view why);
  void ContinueRollingRestart();
  void BeginShutdown(int signo);
  void ForwardSignal(int signo);
  void CheckBinaryChanged();
  pid_t ActivePidForSlot(int slot) const;
  // Metrics (metrics.listen non-empty): the region workers publish into and the HTTP exporter.
  absl::Status StartMetrics();
  int AllocateMetricsSlot();
  // Tells the exporter which processes serve which slots (after every change to processes_).
  void PublishProcesses();

  SupervisorOptions options_;
  net::EventLoop loop_;
  config::Config config_;
  int worker_count_ = 0;
  int port_ = 0;
  ListenGuard listen_guard_;               // holds the address's lock while the pod runs
  std::vector<std::vector<int>> tcp_fds_;  // per slot, one per listen address
  int unix_fd_ = -1;                       // shared by all workers
  int budget_fd_ = -1;
  int pod_servers_fd_ = -1;  // budget::PodServerCounts region
  std::string runtime_dir_;
  std::unique_ptr<net::SignalWatcher> signals_;
  std::map<pid_t, Process> processes_;
  std::map<int, std::unique_ptr<ReadyWatcher>> ready_watchers_;  // by pid
  std::vector<absl::Duration> backoff_;                          // per slot
  std::vector<absl::Time> last_crash_;                           // per slot
  uint32_t next_peer_id_ = 1;
  pid_t pod_lease_pid_ = -1;
  absl::Duration pod_lease_backoff_;
  bool pod_lease_rolling_ = false;  // stopped to run the new binary: start it again at once
  bool shutting_down_ = false;
  bool pidfile_written_ = false;
  std::vector<int> rolling_queue_;  // slots still to roll
  pid_t rolling_new_pid_ = -1;      // replacement we wait on
  uint64_t worker_restarts_ = 0;
  ino_t binary_inode_ = 0;
  int64_t binary_mtime_ = 0;
  ino_t candidate_inode_ = 0;
  off_t candidate_size_ = 0;
  int64_t candidate_mtime_ = 0;
  int pending_binary_checks_ = 0;
  std::unique_ptr<metrics::SnapshotRegion> metrics_region_;
  std::unique_ptr<metrics::Exporter> exporter_;
  std::vector<bool> metrics_slot_used_;
};

}  // namespace pgfleet::supervisor
