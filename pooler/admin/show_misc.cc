// SHOW LISTS, MEM, VERSION, and pgfleet's own SHOW WORKERS, PEERS and FLEET.
#include <set>

#include "pooler/admin/show.h"
#include "pooler/metrics/aggregate.h"

namespace pgfleet::admin {
namespace {

using Type = ResultSet::Type;

uint64_t ServerCount(const peering::v1::WorkerStats& w) {
  uint64_t n = 0;
  for (const auto& p : w.pools()) {
    n += p.server_active() + p.server_idle() + p.server_used() + p.server_tested() +
         p.server_login();
  }
  return n;
}

}  // namespace

void ShowLists(const ShowInput& in, ResultSet* out) {
  out->AddColumn("list").AddColumn("items", Type::kInt);
  const auto total = PodTotal(in);
  std::set<std::string> users;
  std::set<std::string> databases;
  for (const auto& [name, db] : in.fleet->databases) {
    if (name != "*") databases.insert(name);
  }
  for (const auto& p : total.pools()) {
    users.insert(p.user());
    databases.insert(p.database());
  }
  auto row = [out](const char* name, uint64_t n) { out->AddRow({name, std::to_string(n)}); };
  row("databases", databases.size());
  row("users", users.size());
  row("pools", static_cast<uint64_t>(total.pools_size()));
  row("free_clients", 0);
  row("used_clients", total.clients());
  row("login_clients", total.login_clients());
  row("free_servers", 0);
  row("used_servers", ServerCount(total));
  row("dns_names", 0);
  row("dns_zones", 0);
  row("dns_queries", 0);
  row("dns_pending", 0);
}

void ShowMem(const ShowInput& in, ResultSet* out) {
  // pgfleet has no slab caches: one row per kind of object, and the workers' resident memory.
  out->AddColumn("name").AddColumn("size", Type::kInt).AddColumn("used", Type::kInt);
  out->AddColumn("free", Type::kInt).AddColumn("memtotal", Type::kInt);
  const auto total = PodTotal(in);
  out->AddRow({"worker_rss", std::to_string(total.rss_bytes()), std::to_string(in.workers.size()),
               "0", std::to_string(total.rss_bytes())});
  out->AddRow({"client", "", std::to_string(total.clients()), "0", ""});
  out->AddRow({"server", "", std::to_string(ServerCount(total)), "0", ""});
  out->AddRow({"pool", "", std::to_string(total.pools_size()), "0", ""});
}

void ShowVersion(const std::string& version, ResultSet* out) {
  out->AddColumn("version");
  out->AddRow({"pgfleet " + version});
}

void ShowState(bool paused, ResultSet* out) {
  // PgBouncer's rows; SUSPEND does not exist here, so "suspended" is always no.
  out->AddColumn("key").AddColumn("value");
  out->AddRow({"active", paused ? "no" : "yes"});
  out->AddRow({"paused", paused ? "yes" : "no"});
  out->AddRow({"suspended", "no"});
}

void ShowWorkers(const ShowInput& in, ResultSet* out) {
  out->AddColumn("worker", Type::kInt)
      .AddColumn("peer_id", Type::kInt)
      .AddColumn("pid", Type::kInt);
  out->AddColumn("state");
  for (const char* c :
       {"clients", "login_clients", "admin_clients", "pools", "servers", "xact_count",
        "query_count", "cancels_received", "cancels_forwarded", "rss_kb"}) {
    out->AddColumn(c, Type::kInt);
  }
  out->AddColumn("started_at").AddColumn("config_loaded_at");
  for (const auto& w : in.workers) {
    uint64_t transactions = 0, queries = 0;
    for (const auto& p : w.pools()) {
      transactions += p.transactions();
      queries += p.queries();
    }
    out->AddRow({std::to_string(w.slot()), std::to_string(w.peer_id()), std::to_string(w.pid()),
                 w.ready() ? "ready" : "not_ready", std::to_string(w.clients()),
                 std::to_string(w.login_clients()), std::to_string(w.admin_clients()),
                 std::to_string(w.pools_size()), std::to_string(ServerCount(w)),
                 std::to_string(transactions), std::to_string(queries),
                 std::to_string(w.cancels_received()), std::to_string(w.cancels_forwarded()),
                 std::to_string(w.rss_bytes() / 1024), FormatUnixMs(w.started_at_ms()),
                 FormatUnixMs(w.config_loaded_at_ms())});
  }
  for (const auto& [peer_id, error] : in.failed) {
    out->AddRow({"", std::to_string(peer_id), "", "unreachable: " + error});
  }
}

void ShowPeers(const ShowInput& in, ResultSet* out) {
  out->AddColumn("peer_id", Type::kInt).AddColumn("kind").AddColumn("address");
  out->AddColumn("worker", Type::kInt).AddColumn("pid", Type::kInt).AddColumn("status");
  for (const auto& w : in.workers) {
    const bool self = w.peer_id() == in.own_peer_id;
    out->AddRow({std::to_string(w.peer_id()), self ? "self" : "worker",
                 self ? "" : "worker-" + std::to_string(w.peer_id()) + ".sock",
                 std::to_string(w.slot()), std::to_string(w.pid()), "ok"});
  }
  for (const auto& [peer_id, error] : in.failed) {
    out->AddRow({std::to_string(peer_id), "worker", "worker-" + std::to_string(peer_id) + ".sock",
                 "", "", error});
  }
}

void ShowFleet(const ShowInput& in, ResultSet* out) {
  // One row for this pod (the controller will add the other pods).
  out->AddColumn("scope");
  for (const char* c : {"workers", "workers_ready", "workers_unreachable", "clients", "servers",
                        "pools", "xact_count", "query_count", "max_client_conn"}) {
    out->AddColumn(c, Type::kInt);
  }
  const auto total = PodTotal(in);
  uint64_t ready = 0, transactions = 0, queries = 0;
  for (const auto& w : in.workers) ready += w.ready() ? 1 : 0;
  for (const auto& p : total.pools()) {
    transactions += p.transactions();
    queries += p.queries();
  }
  out->AddRow({"pod", std::to_string(in.workers.size() + in.failed.size()), std::to_string(ready),
               std::to_string(in.failed.size()), std::to_string(total.clients()),
               std::to_string(ServerCount(total)), std::to_string(total.pools_size()),
               std::to_string(transactions), std::to_string(queries),
               std::to_string(total.max_client_conn())});
}

}  // namespace pgfleet::admin
