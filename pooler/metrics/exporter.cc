// The supervisor's /metrics, /healthz and /readyz over civetweb.
#include "pooler/metrics/exporter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "civetweb.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/metrics/aggregate.h"
#include "prometheus/text_serializer.h"

namespace pgfleet::metrics {
namespace {

// A probe answer is reused this long, so a scrape storm does not become a connect storm.
constexpr absl::Duration kProbeCacheFor = absl::Seconds(2);
constexpr int kProbeTimeoutMs = 1000;

// civetweb's spelling of host:port ("*" = every address).
std::string CivetListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host == "*" || host.empty()) return port;
  if (host == "localhost") host = "127.0.0.1";
  return base::StrCat(host, ":", port);
}

// Connects to host:port (or the unix socket of a directory host) within the timeout.
bool CanConnect(const std::string& host, int port) {
  int fd = -1;
  int rc = -1;
  if (!host.empty() && host[0] == '/') {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = base::StrCat(host, "/.s.PGSQL.", port);
    if (path.size() >= sizeof(addr.sun_path)) return false;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 ||
        res == nullptr) {
      return false;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (fd < 0) return false;
  }
  bool ok = rc == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, kProbeTimeoutMs) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
  }
  close(fd);
  return ok;
}

void Respond(mg_connection* conn, int status, std::string_view status_text,
             std::string_view content_type, std::string_view body) {
  mg_printf(conn,
            "HTTP/1.1 %d %.*s\r\nContent-Type: %.*s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            status, static_cast<int>(status_text.size()), status_text.data(),
            static_cast<int>(content_type.size()), content_type.data(), body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

Readiness EvaluateReadiness(int worker_count, const std::map<int, peering::v1::WorkerStats>& latest,
                            absl::Time now, const std::function<bool()>& probe_postgres) {
  bool servers = false;
  for (int slot = 0; slot < worker_count; ++slot) {
    auto it = latest.find(slot);
    if (it == latest.end()) return {false, base::StrCat("worker ", slot, " has not reported yet")};
    const auto& s = it->second;
    if (!s.ready()) return {false, base::StrCat("worker ", slot, " is not accepting clients")};
    if (now - absl::FromUnixMillis(s.snapshot_time_ms()) > kStaleAfter) {
      return {false, base::StrCat("worker ", slot, " stopped reporting (hung?)")};
    }
    servers |= LoggedInServers(s) > 0;
  }
  if (!servers && !probe_postgres()) return {false, "PostgreSQL is not reachable"};
  return {true, ""};
}

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Start(ExporterOptions options,
                                                          SnapshotRegion* region) {
  std::unique_ptr<Exporter> self(new Exporter(std::move(options), region));
  const std::string ports = CivetListen(self->options_.listen);
  const char* civet_options[] = {"listening_ports",    ports.c_str(), "num_threads", "4",
                                 "request_timeout_ms", "10000",       nullptr};
  mg_callbacks callbacks{};
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = self.get();
  init.configuration_options = civet_options;
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{};
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  self->ctx_ = mg_start2(&init, &error);
  if (self->ctx_ == nullptr) {
    return absl::UnavailableError(
        base::StrCat("metrics.listen: cannot serve on ", self->options_.listen, ": ", error_text));
  }
  mg_set_request_handler(self->ctx_, "/metrics$", &Exporter::HandleMetrics, self.get());
  mg_set_request_handler(self->ctx_, "/healthz$", &Exporter::HandleHealthz, self.get());
  mg_set_request_handler(self->ctx_, "/readyz$", &Exporter::HandleReadyz, self.get());
  mg_server_port server_ports[4];
  const int n = mg_get_server_ports(self->ctx_, 4, server_ports);
  if (n > 0) self->port_ = server_ports[0].port;
  PGFLEET_LOG(kInfo, "metrics_listening", "address=", self->options_.listen, " port=", self->port_);
  return self;
}

Exporter::~Exporter() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

void Exporter::SetProcesses(std::vector<WorkerProcess> processes) {
  std::lock_guard<std::mutex> lock(mu_);
  processes_ = std::move(processes);
}

void Exporter::OnProcessExited(int slot, uint32_t metrics_slot) {
  std::string bytes;
  peering::v1::WorkerStats last;
  std::lock_guard<std::mutex> lock(mu_);
  if (region_->Read(metrics_slot, &bytes) && last.ParseFromString(bytes)) {
    AddWorkerStats(last, AddMode::kCountersOnly, &retired_[slot]);
  }
  region_->Clear(metrics_slot);
  std::erase_if(processes_,
                [metrics_slot](const WorkerProcess& p) { return p.metrics_slot == metrics_slot; });
}

void Exporter::SetWorkerRestarts(uint64_t restarts) {
  std::lock_guard<std::mutex> lock(mu_);
  worker_restarts_ = restarts;
}

std::map<int, peering::v1::WorkerStats> Exporter::LatestServing() {
  std::map<int, peering::v1::WorkerStats> latest;
  std::string bytes;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : processes_) {
    if (!p.serving) continue;
    peering::v1::WorkerStats s;
    if (region_->Read(p.metrics_slot, &bytes) && s.ParseFromString(bytes)) {
      latest[p.slot] = std::move(s);
    }
  }
  return latest;
}

bool Exporter::ProbePostgres() {
  std::lock_guard<std::mutex> lock(probe_mu_);
  const absl::Time now = absl::Now();
  if (now - probed_at_ < kProbeCacheFor) return probe_ok_;
  probe_ok_ = false;
  for (const auto& [host, port] : options_.postgres) {
    if (CanConnect(host, port)) {
      probe_ok_ = true;
      break;
    }
  }
  probed_at_ = absl::Now();
  return probe_ok_;
}

Readiness Exporter::CheckReadiness() {
  return EvaluateReadiness(options_.worker_count, LatestServing(), absl::Now(),
                           [this] { return ProbePostgres(); });
}

PodView Exporter::BuildView(Readiness readiness) {
  PodView view;
  view.version = options_.version;
  view.up = readiness.ready;
  std::string bytes;
  std::lock_guard<std::mutex> lock(mu_);
  view.worker_restarts = worker_restarts_;
  for (const auto& [slot, retired] : retired_) {
    AddWorkerStats(retired, AddMode::kCountersOnly, &view.slots[slot]);
  }
  for (const auto& p : processes_) {
    if (p.serving) ++view.workers_serving;
    peering::v1::WorkerStats s;
    if (region_->Read(p.metrics_slot, &bytes) && s.ParseFromString(bytes)) {
      AddWorkerStats(s, AddMode::kEverything, &view.slots[p.slot]);
    }
  }
  return view;
}

std::string Exporter::RenderMetrics() {
  PodView view = BuildView(CheckReadiness());
  return prometheus::TextSerializer().Serialize(BuildFamilies(view));
}

int Exporter::HandleMetrics(mg_connection* conn, void* self) {
  const std::string body = static_cast<Exporter*>(self)->RenderMetrics();
  Respond(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
  return 200;
}

int Exporter::HandleHealthz(mg_connection* conn, void*) {
  Respond(conn, 200, "OK", "text/plain; charset=utf-8", "ok\n");
  return 200;
}

int Exporter::HandleReadyz(mg_connection* conn, void* self) {
  const Readiness r = static_cast<Exporter*>(self)->CheckReadiness();
  if (r.ready) {
    Respond(conn, 200, "OK", "text/plain; charset=utf-8", "ready\n");
    return 200;
  }
  Respond(conn, 503, "Service Unavailable", "text/plain; charset=utf-8",
          base::StrCat("not ready: ", r.reason, "\n"));
  return 503;
}

}  // namespace pgfleet::metrics
