// Supervisor: worker processes, restarts, signals and rolling restarts.
#include "pooler/supervisor/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pooler/base/log.h"
#include "pooler/base/status_macros.h"
#include "pooler/budget/client_budget.h"
#include "pooler/budget/pod_server_counts.h"
#include "pooler/net/socket.h"
#include "pooler/protocol/cancel_key.h"
#include "pooler/supervisor/cpu_quota.h"

#ifndef PGFLEET_VERSION
#define PGFLEET_VERSION "dev"
#endif

namespace pgfleet::supervisor {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);
// A worker that lived this long is considered healthy: its next crash restarts it at once.
constexpr absl::Duration kStableAfter = absl::Seconds(30);

void ClearCloexec(int fd) {
  int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit_code=", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal=", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "status=unknown";
}

}  // namespace

// Waits for a new worker's one-byte "ready" on its pipe (EOF = it died first). Deleted through
// ForgetReadyWatcher, never mid-batch.
class Supervisor::ReadyWatcher final : public net::IoHandler, public net::DeferredDeletable {
 public:
  ReadyWatcher(Supervisor* s, pid_t pid, int fd) : s_(s), pid_(pid), fd_(fd) {}
  ~ReadyWatcher() override {
    s_->loop_.Remove(fd_);
    close(fd_);
  }
  void OnIoEvent(uint32_t) override {
    char byte;
    ssize_t n = read(fd_, &byte, 1);
    pid_t pid = pid_;
    Supervisor* s = s_;
    s->loop_.Post([s, pid] { s->ForgetReadyWatcher(pid); });
    if (n == 1) s->OnWorkerReady(pid);
  }

 private:
  Supervisor* s_;
  pid_t pid_;
  int fd_;
};

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() {
  ready_watchers_.clear();
  ReleaseRuntimeFiles();
}

void Supervisor::CloseListeners() {
  for (const auto& fds : tcp_fds_) {
    for (int fd : fds) close(fd);
  }
  tcp_fds_.clear();
  if (unix_fd_ >= 0) close(unix_fd_);
  unix_fd_ = -1;
}

absl::Status Supervisor::WritePidFile() {
  if (config_.pidfile.empty()) return absl::OkStatus();
  const std::string text = absl::StrCat(getpid(), "\n");
  const int fd = open(config_.pidfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("pidfile ", config_.pidfile, ": cannot write"));
  }
  close(fd);
  pidfile_written_ = true;
  return absl::OkStatus();
}

void Supervisor::ReleaseRuntimeFiles() {
  if (pidfile_written_) {
    unlink(config_.pidfile.c_str());
    pidfile_written_ = false;
  }
  CloseListeners();
  if (budget_fd_ >= 0) close(budget_fd_);
  budget_fd_ = -1;
  if (pod_servers_fd_ >= 0) close(pod_servers_fd_);
  pod_servers_fd_ = -1;
  if (!runtime_dir_.empty()) {
    std::error_code error;
    std::filesystem::remove_all(runtime_dir_, error);
    if (error) {
      PGFLEET_LOG(kWarning, "runtime_dir_not_removed", "dir=", runtime_dir_,
                  " error=", base::LogQuote(error.message()));
    }
    runtime_dir_.clear();
  }
}

absl::Status Supervisor::Init() {
  RETURN_IF_ERROR(loop_.Init());
  // Signals first: a SIGHUP during start-up must not kill the pod.
  // PgBouncer's signals mean the same here: SIGHUP reloads, SIGUSR1 is PAUSE and SIGUSR2 RESUME
  // (every worker applies it), SIGQUIT shuts down at once, SIGTERM and SIGINT drain first. A
  // rolling restart of the workers is SIGRTMIN (`kill -s RTMIN`), or a new binary on disk.
  signals_ = std::make_unique<net::SignalWatcher>(
      loop_,
      std::vector<int>{SIGCHLD, SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGRTMIN},
      [this](int signo) {
        if (signo == SIGRTMIN) {
          BeginRollingRestart("SIGRTMIN");
          return;
        }
        switch (signo) {
          case SIGCHLD:
            ReapChildren();
            break;
          case SIGHUP:
            PGFLEET_LOG(kInfo, "reload_requested", "workers=", processes_.size());
            base::SetLogFile(config_.log.file);  // a rotated log.file: on to the new one
            ForwardSignal(SIGHUP);
            break;
          case SIGUSR1:
            PGFLEET_LOG(kInfo, "pause_requested", "signal=SIGUSR1 workers=", processes_.size());
            ForwardSignal(SIGUSR1);
            break;
          case SIGUSR2:
            PGFLEET_LOG(kInfo, "resume_requested", "signal=SIGUSR2 workers=", processes_.size());
            ForwardSignal(SIGUSR2);
            break;
          default:
            BeginShutdown(signo);
            break;
        }
      });
  RETURN_IF_ERROR(signals_->Start());
  ASSIGN_OR_RETURN(config_, config::LoadConfigFile(options_.config_path));
  base::SetLogFile(config_.log.file);
  RETURN_IF_ERROR(WritePidFile());
  worker_count_ = ResolveWorkerCount(config_.workers);
  // Local peer ids are 8 bits (protocol/cancel_key.h); a rolling restart holds two per slot.
  if (worker_count_ > static_cast<int>(protocol::kMaxLocalPeerId) / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.config_path, ": workers: too many workers (", worker_count_, ")"));
  }
  const std::string base =
      config_.peering.runtime_dir.empty() ? "/tmp" : config_.peering.runtime_dir;
  std::string tmpl = absl::StrCat(base, "/pgfleet.XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create runtime directory under ", base));
  }
  runtime_dir_ = tmpl;
  // Before anything binds: a second pgfleet on this address and port (or anything else listening
  // there) is refused, where SO_REUSEPORT would let it in to take a share of the clients
  // (listen_guard.h).
  bool first = true;
  for (const std::string& address : config_.listen.Addresses()) {
    RETURN_IF_ERROR(listen_guard_.Acquire(address, config_.listen.port,
                                          first ? config_.listen.unix_socket_dir : ""));
    first = false;
  }
  // Metrics first: once the client port is bound it accepts, and workers should follow at once.
  RETURN_IF_ERROR(StartMetrics());
  RETURN_IF_ERROR(CreateListeners());
  ASSIGN_OR_RETURN(budget_fd_, budget::ClientBudget::CreateSharedRegion());
  fcntl(budget_fd_, F_SETFD, FD_CLOEXEC);  // opened to each worker explicitly in Spawn
  ASSIGN_OR_RETURN(pod_servers_fd_, budget::PodServerCounts::CreateSharedRegion());
  fcntl(pod_servers_fd_, F_SETFD, FD_CLOEXEC);
  backoff_.assign(static_cast<size_t>(worker_count_), kMinBackoff);
  last_crash_.assign(static_cast<size_t>(worker_count_), absl::InfinitePast());
  struct stat st;
  if (stat(options_.binary_path.c_str(), &st) == 0) {
    binary_inode_ = st.st_ino;
    binary_mtime_ = st.st_mtim.tv_sec;
  }
  return absl::OkStatus();
}

absl::Status Supervisor::CreateListeners() {
  const auto& listen = config_.listen;
  int port = listen.port;
  for (int i = 0; i < worker_count_; ++i) {
    tcp_fds_.emplace_back();
    for (const std::string& address : listen.Addresses()) {
      ASSIGN_OR_RETURN(int fd, net::ListenTcp(address, port, listen.backlog));
      if (port == 0) port = net::BoundPort(fd);  // the rest join the port the first one got
      tcp_fds_.back().push_back(fd);
    }
  }
  port_ = port;
  PGFLEET_LOG(kInfo, "listening", "address=", listen.address, " port=", port_,
              " workers=", worker_count_);
  if (!listen.unix_socket_dir.empty()) {
    // Probed in Init when the port was configured; a port the kernel picked is probed here.
    if (listen.port == 0) {
      RETURN_IF_ERROR(ListenGuard::CheckUnixSocketFree(listen.unix_socket_dir, port_));
    }
    ASSIGN_OR_RETURN(unix_fd_, net::ListenUnix(listen.unix_socket_dir, port_, listen.backlog,
                                               net::UnixSocketAccess{listen.unix_socket_mode,
                                                                     listen.unix_socket_group}));
    PGFLEET_LOG(kInfo, "listening", "unix_socket_dir=", listen.unix_socket_dir, " port=", port_);
  }
  return absl::OkStatus();
}

absl::Status Supervisor::StartMetrics() {
  if (config_.metrics.listen.empty()) {
    PGFLEET_LOG(kInfo, "metrics_disabled", "reason=metrics.listen_empty");
    return absl::OkStatus();
  }
  // A slot may be served by a draining worker and its replacement at once, and a drain can
  // outlast the next rolling restart: room for a few processes per slot.
  const uint32_t slots = static_cast<uint32_t>(worker_count_) * 4 + 4;
  ASSIGN_OR_RETURN(metrics_region_, metrics::SnapshotRegion::Create(slots));
  fcntl(metrics_region_->fd(), F_SETFD, FD_CLOEXEC);  // opened to each worker in Spawn
  metrics_slot_used_.assign(slots, false);
  metrics::ExporterOptions options;
  options.listen = config_.metrics.listen;
  options.version = PGFLEET_VERSION;
  options.worker_count = worker_count_;
  for (const auto& [name, db] : config_.databases) {
    for (const config::HostAddress& address : db.Addresses()) {
      std::pair<std::string, int> target(address.host, address.port);
      if (std::find(options.postgres.begin(), options.postgres.end(), target) ==
          options.postgres.end()) {
        options.postgres.push_back(target);
      }
    }
  }
  ASSIGN_OR_RETURN(exporter_, metrics::Exporter::Start(std::move(options), metrics_region_.get()));
  return absl::OkStatus();
}

int Supervisor::AllocateMetricsSlot() {
  for (size_t i = 0; i < metrics_slot_used_.size(); ++i) {
    if (!metrics_slot_used_[i]) {
      metrics_slot_used_[i] = true;
      metrics_region_->Clear(static_cast<uint32_t>(i));
      return static_cast<int>(i);
    }
  }
  return -1;
}

void Supervisor::PublishProcesses() {
  if (exporter_ == nullptr) return;
  std::vector<metrics::WorkerProcess> list;
  for (const auto& [pid, p] : processes_) {
    if (p.metrics_slot < 0) continue;
    list.push_back({pid, p.slot, static_cast<uint32_t>(p.metrics_slot), p.role == Role::kActive});
  }
  exporter_->SetProcesses(std::move(list));
}

uint32_t Supervisor::NextPeerId() {
  // Ids are never reused while a process holding them lives, so a cancel key always names the
  // process that minted it (a draining worker and its replacement differ).
  while (true) {
    uint32_t id = next_peer_id_;
    next_peer_id_ = next_peer_id_ >= protocol::kMaxLocalPeerId ? 1 : next_peer_id_ + 1;
    bool used = false;
    for (const auto& [pid, p] : processes_) used |= p.peer_id == id;
    if (!used) return id;
  }
}

pid_t Supervisor::Exec(std::vector<std::string> args, const std::vector<int>& inherit) {
  args.insert(args.begin(), options_.binary_path);
  // Built before fork: the child only calls async-signal-safe functions (the exporter's threads
  // exist in this process, so the child must not allocate).
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t supervisor_pid = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  // A child must not outlive its supervisor (killed or crashed), still serving the port with
  // nobody to restart or stop it: SIGTERM then, which it takes as a graceful shutdown.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != supervisor_pid) _exit(0);
  for (int fd : inherit) ClearCloexec(fd);
  // Keep the control signals blocked across exec: a signal that arrives before the child has
  // its signalfd stays pending instead of killing it (the mask survives execv).
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&mask, sig);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  execv(options_.binary_path.c_str(), argv.data());
  _exit(127);
}

void Supervisor::SpawnPodLease() {
  if (shutting_down_ || !config_.controller.enabled()) return;
  pod_lease_pid_ = Exec({absl::StrCat("--config=", options_.config_path), "--pod_lease",
                         absl::StrCat("--runtime_dir=", runtime_dir_),
                         absl::StrCat("--pod_servers_fd=", pod_servers_fd_)},
                        {pod_servers_fd_});
  if (pod_lease_pid_ < 0) {
    PGFLEET_LOG(kError, "pod_lease_not_started", "error=fork_failed");
    loop_.RunAfter(kMinBackoff, [this] { SpawnPodLease(); });
    return;
  }
  PGFLEET_LOG(kInfo, "pod_lease_started", "pid=", pod_lease_pid_);
}

void Supervisor::OnPodLeaseExited(int status) {
  pod_lease_pid_ = -1;
  if (shutting_down_) {
    PGFLEET_LOG(kInfo, "pod_lease_exited", DescribeExit(status));
    if (processes_.empty()) loop_.Stop();
    return;
  }
  if (pod_lease_rolling_) {
    pod_lease_rolling_ = false;
    SpawnPodLease();
    return;
  }
  // The workers keep the shares it left in the pod's counts, and fall back to the floors on
  // their own if no holder renews the lease in time.
  pod_lease_backoff_ = std::clamp(pod_lease_backoff_ * 2, kMinBackoff, kMaxBackoff);
  PGFLEET_LOG(kError, "pod_lease_died", DescribeExit(status),
              " backoff_ms=", absl::ToInt64Milliseconds(pod_lease_backoff_));
  loop_.RunAfter(pod_lease_backoff_, [this] { SpawnPodLease(); });
}

void Supervisor::FinishShutdown() {
  if (!processes_.empty()) return;
  if (pod_lease_pid_ > 0) {
    kill(pod_lease_pid_, SIGTERM);  // it leaves the controller, then exits (OnPodLeaseExited)
    return;
  }
  loop_.Stop();
}

pid_t Supervisor::Spawn(int slot) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  const uint32_t peer_id = NextPeerId();
  const int metrics_slot = metrics_region_ != nullptr ? AllocateMetricsSlot() : -1;
  if (metrics_region_ != nullptr && metrics_slot < 0) {
    PGFLEET_LOG(kWarning, "metrics_slots_exhausted", "slot=", slot);
  }
  const int metrics_fd = metrics_slot >= 0 ? metrics_region_->fd() : -1;
  std::vector<int> listen_fds = tcp_fds_[static_cast<size_t>(slot)];
  if (unix_fd_ >= 0) listen_fds.push_back(unix_fd_);
  std::vector<std::string> args = {
      "--config",
      options_.config_path,
      absl::StrCat("--worker_slot=", slot),
      absl::StrCat("--worker_count=", worker_count_),
      absl::StrCat("--peer_id=", peer_id),
      absl::StrCat("--runtime_dir=", runtime_dir_),
      absl::StrCat("--listen_fds=", absl::StrJoin(listen_fds, ",")),
      absl::StrCat("--client_budget_fd=", budget_fd_),
      absl::StrCat("--pod_servers_fd=", pod_servers_fd_),
      absl::StrCat("--ready_fd=", ready[1]),
      absl::StrCat("--metrics_fd=", metrics_fd),
      absl::StrCat("--metrics_slot=", std::max(metrics_slot, 0)),
  };
  std::vector<int> inherit = listen_fds;
  inherit.insert(inherit.end(), {budget_fd_, pod_servers_fd_, ready[1]});
  if (metrics_fd >= 0) inherit.push_back(metrics_fd);
  const pid_t pid = Exec(std::move(args), inherit);
  if (pid < 0) {
    close(ready[0]);
    close(ready[1]);
    if (metrics_slot >= 0) metrics_slot_used_[static_cast<size_t>(metrics_slot)] = false;
    return -1;
  }
  close(ready[1]);
  Process process;
  process.slot = slot;
  process.peer_id = peer_id;
  process.started_at = loop_.now();
  process.metrics_slot = metrics_slot;
  processes_[pid] = process;
  PublishProcesses();
  auto watcher = std::make_unique<ReadyWatcher>(this, pid, ready[0]);
  if (loop_.Add(ready[0], watcher.get(), EPOLLIN).ok()) ready_watchers_[pid] = std::move(watcher);
  PGFLEET_LOG(kInfo, "worker_started", "slot=", slot, " pid=", pid, " peer_id=", peer_id);
  return pid;
}

void Supervisor::ForgetReadyWatcher(pid_t pid) {
  auto it = ready_watchers_.find(pid);
  if (it == ready_watchers_.end()) return;
  // The batch of events being handled may still hold one for its pipe: the worker closes the pipe
  // right after its "ready" byte, so the EOF can sit next to the posted call that got us here (or
  // next to the SIGCHLD). The loop deletes it after the batch.
  loop_.DeferredDelete(std::move(it->second));
  ready_watchers_.erase(it);
}

pid_t Supervisor::ActivePidForSlot(int slot) const {
  for (const auto& [pid, p] : processes_) {
    if (p.slot == slot && p.role == Role::kActive) return pid;
  }
  return -1;
}

void Supervisor::OnWorkerReady(pid_t pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  const int slot = it->second.slot;
  // The replacement serves the slot now; the previous worker drains.
  pid_t old = ActivePidForSlot(slot);
  it->second.role = Role::kActive;
  PGFLEET_LOG(kInfo, "worker_ready", "slot=", slot, " pid=", pid);
  if (old > 0 && old != pid) {
    processes_[old].role = Role::kDraining;
    PGFLEET_LOG(kInfo, "worker_draining", "slot=", slot, " pid=", old);
    kill(old, SIGTERM);
  }
  PublishProcesses();
  if (pid == rolling_new_pid_) {
    rolling_new_pid_ = -1;
    ContinueRollingRestart();
  }
}

void Supervisor::ReapChildren() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) OnChildExited(pid, status);
}

void Supervisor::ReleaseServersOfDeadWorker(uint32_t peer_id) {
  budget::PodServerCounts::HeldServers held =
      budget::PodServerCounts::DetachWorker(pod_servers_fd_, peer_id);
  const absl::Duration check = config_.pool.server_connection_check_interval;
  if (held.open.empty() || check <= absl::ZeroDuration()) {
    budget::PodServerCounts::ReleaseHeld(pod_servers_fd_, held);
    return;
  }
  // Counted per key (pool, database, user): the largest is the number of servers.
  int32_t servers = 0;
  for (const auto& [key, open] : held.open) servers = std::max(servers, open);
  const absl::Duration hold = check * 2 + absl::Milliseconds(250);
  PGFLEET_LOG(kInfo, "dead_worker_servers_held", "peer_id=", peer_id, " servers=", servers,
              " hold_ms=", absl::ToInt64Milliseconds(hold),
              " why=\"PostgreSQL ends their backends within client_connection_check_interval\"");
  loop_.RunAfter(hold, [fd = pod_servers_fd_, held = std::move(held), peer_id] {
    budget::PodServerCounts::ReleaseHeld(fd, held);
    PGFLEET_LOG(kInfo, "dead_worker_servers_released", "peer_id=", peer_id);
  });
}

void Supervisor::OnChildExited(pid_t pid, int status) {
  if (pid == pod_lease_pid_) {
    OnPodLeaseExited(status);
    return;
  }
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  Process process = it->second;
  processes_.erase(it);
  ForgetReadyWatcher(pid);
  if (process.metrics_slot >= 0) {
    // Its counters stay with its worker slot; the region slot may serve another process now.
    exporter_->OnProcessExited(process.slot, static_cast<uint32_t>(process.metrics_slot));
    metrics_slot_used_[static_cast<size_t>(process.metrics_slot)] = false;
  }
  PublishProcesses();
  // A crashed worker leaves its peering socket behind: siblings would keep dialling it.
  unlink(absl::StrCat(runtime_dir_, "/worker-", process.peer_id, ".sock").c_str());
  unlink(absl::StrCat(runtime_dir_, "/handoff-", process.peer_id, ".sock").c_str());
  // Clients of the dead process are gone: give their max_client_conn room back.
  budget::ClientBudget::ReleaseSlot(budget_fd_, process.peer_id);
  // ... and the pod's room for the servers it held. PostgreSQL sees their sockets close, but a
  // backend running a query notices only at its next client_connection_check_interval (which
  // every server login sets): until then the room stays counted, or siblings would open servers
  // while PostgreSQL still runs the orphans and the database would go over its budget.
  ReleaseServersOfDeadWorker(process.peer_id);
  if (shutting_down_) {
    PGFLEET_LOG(kInfo, "worker_exited", "slot=", process.slot, " pid=", pid, " ",
                DescribeExit(status));
    FinishShutdown();
    return;
  }
  if (process.role == Role::kDraining) {
    PGFLEET_LOG(kInfo, "worker_drained", "slot=", process.slot, " pid=", pid, " ",
                DescribeExit(status));
    return;
  }
  PGFLEET_LOG(kError, "worker_died", "slot=", process.slot, " pid=", pid, " ", DescribeExit(status),
              " uptime_s=", absl::ToInt64Seconds(loop_.now() - process.started_at));
  ++worker_restarts_;
  if (exporter_ != nullptr) exporter_->SetWorkerRestarts(worker_restarts_);
  if (pid == rolling_new_pid_) rolling_new_pid_ = -1;
  // Only restart when nothing else serves the slot.
  if (ActivePidForSlot(process.slot) < 0) ScheduleRestart(process.slot);
  if (rolling_new_pid_ < 0 && !rolling_queue_.empty()) ContinueRollingRestart();
}

void Supervisor::ScheduleRestart(int slot) {
  auto& backoff = backoff_[static_cast<size_t>(slot)];
  auto& last = last_crash_[static_cast<size_t>(slot)];
  const absl::Time now = loop_.now();
  backoff = now - last > kStableAfter ? kMinBackoff : std::min(backoff * 2, kMaxBackoff);
  last = now;
  PGFLEET_LOG(kInfo, "worker_restart_scheduled", "slot=", slot,
              " backoff_ms=", absl::ToInt64Milliseconds(backoff));
  loop_.RunAfter(backoff, [this, slot] {
    if (!shutting_down_ && ActivePidForSlot(slot) < 0) {
      pid_t pid = Spawn(slot);
      if (pid > 0) processes_[pid].role = Role::kActive;
      PublishProcesses();
    }
  });
}

void Supervisor::BeginRollingRestart(std::string_view why) {
  if (shutting_down_) return;
  if (!rolling_queue_.empty() || rolling_new_pid_ > 0) {
    PGFLEET_LOG(kInfo, "rolling_restart_busy", "why=", why);
    return;
  }
  PGFLEET_LOG(kInfo, "rolling_restart_started", "why=", why, " workers=", worker_count_);
  for (int slot = 0; slot < worker_count_; ++slot) rolling_queue_.push_back(slot);
  ContinueRollingRestart();
}

void Supervisor::ContinueRollingRestart() {
  if (shutting_down_ || rolling_new_pid_ > 0) return;
  if (rolling_queue_.empty()) {
    PGFLEET_LOG(kInfo, "rolling_restart_done", "workers=", worker_count_);
    if (pod_lease_pid_ > 0) {
      // The lease process too; its successor rejoins with what the pod holds.
      pod_lease_rolling_ = true;
      kill(pod_lease_pid_, SIGTERM);
    }
    return;
  }
  int slot = rolling_queue_.front();
  rolling_queue_.erase(rolling_queue_.begin());
  rolling_new_pid_ = Spawn(slot);
  if (rolling_new_pid_ < 0) ContinueRollingRestart();
}

void Supervisor::ForwardSignal(int signo) {
  for (const auto& [pid, p] : processes_) kill(pid, signo);
  // The lease process reloads its budgets on SIGHUP; it stops only after the workers.
  if (signo == SIGHUP && pod_lease_pid_ > 0) kill(pod_lease_pid_, SIGHUP);
}

void Supervisor::BeginShutdown(int signo) {
  PGFLEET_LOG(kInfo, "shutdown_requested", "signal=", signo, " workers=", processes_.size());
  shutting_down_ = true;
  rolling_queue_.clear();
  ForwardSignal(signo);
  // No worker will be started again, so the listening sockets close once the draining workers
  // drop their copies: new clients get a refusal they can retry elsewhere (Kubernetes has
  // stopped routing to this pod by now) rather than hanging in a backlog until the drain ends.
  CloseListeners();
  FinishShutdown();
}

void Supervisor::CheckBinaryChanged() {
  struct stat st;
  if (stat(options_.binary_path.c_str(), &st) != 0) return;
  if (st.st_ino == binary_inode_ && st.st_mtim.tv_sec == binary_mtime_) {
    pending_binary_checks_ = 0;
    return;
  }
  // Roll only once the new file has stopped changing (a deploy or a linker may still be writing
  // it): the same inode, size and mtime on two checks in a row.
  if (st.st_ino != candidate_inode_ || st.st_size != candidate_size_ ||
      st.st_mtim.tv_sec != candidate_mtime_) {
    candidate_inode_ = st.st_ino;
    candidate_size_ = st.st_size;
    candidate_mtime_ = st.st_mtim.tv_sec;
    pending_binary_checks_ = 1;
    return;
  }
  if (++pending_binary_checks_ < 2) return;
  binary_inode_ = st.st_ino;
  binary_mtime_ = st.st_mtim.tv_sec;
  pending_binary_checks_ = 0;
  BeginRollingRestart("binary changed");
}

absl::Status Supervisor::Run() {
  SpawnPodLease();
  for (int slot = 0; slot < worker_count_; ++slot) {
    pid_t pid = Spawn(slot);
    if (pid < 0) return absl::InternalError("fork failed");
    processes_[pid].role = Role::kActive;
  }
  PublishProcesses();
  loop_.RunEvery(absl::Seconds(2), [this] { CheckBinaryChanged(); });
  RETURN_IF_ERROR(loop_.Run());
  PGFLEET_LOG(kInfo, "supervisor_exited", "worker_restarts=", worker_restarts_);
  return absl::OkStatus();
}

}  // namespace pgfleet::supervisor
