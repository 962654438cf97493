// SHOW CLIENTS and SHOW SERVERS: one row per connection of every worker, with PgBouncer's
// columns plus `worker` (the worker slot that owns the connection). `ptr` and `link` are ids
// unique in the pod (peer id and connection id), so a client's link is its server's ptr.
#include "absl/strings/str_format.h"
#include "pooler/admin/show.h"

namespace pgfleet::admin {
namespace {

using Type = ResultSet::Type;

std::string Ptr(uint32_t peer_id, uint64_t id) {
  if (id == 0) return "";
  return absl::StrFormat("%x", (uint64_t{peer_id} << 40) | id);
}

void AddColumns(ResultSet* out) {
  out->AddColumn("type").AddColumn("user").AddColumn("database").AddColumn("replication");
  out->AddColumn("state").AddColumn("addr").AddColumn("port", Type::kInt);
  out->AddColumn("local_addr").AddColumn("local_port", Type::kInt);
  out->AddColumn("connect_time").AddColumn("request_time");
  out->AddColumn("wait", Type::kInt).AddColumn("wait_us", Type::kInt);
  out->AddColumn("close_needed", Type::kInt).AddColumn("ptr").AddColumn("link");
  out->AddColumn("remote_pid", Type::kInt).AddColumn("tls").AddColumn("application_name");
  out->AddColumn("prepared_statements", Type::kInt).AddColumn("id", Type::kInt);
  out->AddColumn("worker", Type::kInt);
}

std::vector<std::string> Row(const char* type, const peering::v1::WorkerStats& w,
                             const peering::v1::ConnectionInfo& c) {
  return {type, c.user(), c.database(), "none", c.state(), c.addr(), std::to_string(c.port()),
          c.local_addr(), std::to_string(c.local_port()), FormatUnixMs(c.connect_time_ms()),
          FormatUnixMs(c.request_time_ms()), std::to_string(c.wait_us() / 1000000),
          std::to_string(c.wait_us() % 1000000), c.close_needed() ? "1" : "0",
          Ptr(w.peer_id(), c.id()), Ptr(w.peer_id(), c.link()), std::to_string(c.remote_pid()),
          c.tls(), c.application_name(), "0",
          // Fleet-wide, as KILL_CLIENT takes it: the worker's peer id in the high half.
          std::to_string((static_cast<uint64_t>(w.peer_id()) << 32) | c.id()),
          std::to_string(w.slot())};
}

}  // namespace

void ShowClients(const ShowInput& in, ResultSet* out) {
  AddColumns(out);
  // pgfleet's own: what session state pins the client's server (transaction pooling), and how
  // many channels it listens on through the worker's LISTEN hub (not a pin).
  out->AddColumn("pinned");
  out->AddColumn("listening", Type::kInt);
  for (const auto& w : in.workers) {
    for (const auto& c : w.clients_info()) {
      std::vector<std::string> row = Row("C", w, c);
      row.push_back(c.pinned());
      row.push_back(std::to_string(c.listening()));
      out->AddRow(std::move(row));
    }
  }
}

void ShowServers(const ShowInput& in, ResultSet* out) {
  AddColumns(out);
  // pgfleet's own: the role of the server's host (host lists, target_session_attrs).
  out->AddColumn("host_role");
  const auto hosts = LatestHosts(in);
  for (const auto& w : in.workers) {
    for (const auto& s : w.servers_info()) {
      std::vector<std::string> row = Row("S", w, s);
      auto host = hosts.find(HostKey(s.database(), s.addr(), s.port()));
      row.push_back(host == hosts.end() ? "unknown" : host->second.role());
      out->AddRow(std::move(row));
    }
  }
}

}  // namespace pgfleet::admin
