// The admin console: dispatch, permissions and per-client ordering.
#include "pooler/admin/console.h"

#include <algorithm>
#include <set>

#include "pooler/admin/show.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/client_conn.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::admin {
namespace {

using peering::v1::AdminCommandRequest;

// SQLSTATEs of the console's errors (PostgreSQL's errcodes.txt).
constexpr std::string_view kSyntaxError = "42601";
constexpr std::string_view kInsufficientPrivilege = "42501";
constexpr std::string_view kInvalidCatalogName = "3D000";
constexpr std::string_view kConnectionFailure = "08006";
constexpr std::string_view kInvalidParameterValue = "22023";

// Gathering stats waits this long for a sibling; PAUSE and WAIT_CLOSE wait as long as it takes
// (as PgBouncer's do), other commands are quick.
constexpr absl::Duration kGatherDeadline = absl::Seconds(5);
constexpr absl::Duration kQuickCommandDeadline = absl::Seconds(30);
constexpr absl::Duration kWaitingCommandDeadline = absl::Hours(24);

std::string ErrorBytes(std::string_view sqlstate, std::string_view message) {
  protocol::StringSink sink;
  protocol::BuildErrorResponse(sink, "ERROR", sqlstate, message);
  return sink.bytes();
}

AdminCommandRequest::Command ToProto(Verb verb) {
  switch (verb) {
    case Verb::kPause:
      return AdminCommandRequest::COMMAND_PAUSE;
    case Verb::kResume:
      return AdminCommandRequest::COMMAND_RESUME;
    case Verb::kReconnect:
      return AdminCommandRequest::COMMAND_RECONNECT;
    case Verb::kKill:
      return AdminCommandRequest::COMMAND_KILL;
    case Verb::kReload:
      return AdminCommandRequest::COMMAND_RELOAD;
    case Verb::kWaitClose:
      return AdminCommandRequest::COMMAND_WAIT_CLOSE;
    case Verb::kKillClient:
      return AdminCommandRequest::COMMAND_KILL_CLIENT;
    case Verb::kDisable:
      return AdminCommandRequest::COMMAND_DISABLE;
    case Verb::kEnable:
      return AdminCommandRequest::COMMAND_ENABLE;
    case Verb::kSet:
      return AdminCommandRequest::COMMAND_SET;
    default:
      return AdminCommandRequest::COMMAND_UNSPECIFIED;
  }
}

}  // namespace

Console::Console(pool::PoolRegistry& registry, PodFanout& fanout, ConsoleOptions options)
    : registry_(registry), fanout_(fanout), options_(std::move(options)) {}

bool Console::MayConnect(const std::string& user) const {
  // PgBouncer's auth_type any lets every user in to the console as admin.
  if (registry_.config().auth.type == config::AuthType::kAny) return true;
  const auto& admin = registry_.config().admin;
  return std::find(admin.users.begin(), admin.users.end(), user) != admin.users.end() ||
         std::find(admin.stats_users.begin(), admin.stats_users.end(), user) !=
             admin.stats_users.end();
}

bool Console::IsAdmin(const std::string& user) const {
  if (registry_.config().auth.type == config::AuthType::kAny) return true;
  const auto& users = registry_.config().admin.users;
  return std::find(users.begin(), users.end(), user) != users.end();
}

void Console::HandleQuery(pool::ClientConn& client, std::string_view sql) {
  Session& session = sessions_[client.id()];
  if (session.busy) {
    session.queued.emplace_back(sql);
    return;
  }
  session.busy = true;
  Run(client.id(), client.user(), std::string(sql));
}

void Console::Reply(uint64_t client_id, const std::string& bytes, bool close_after) {
  pool::ClientConn* client = registry_.FindClient(client_id);
  if (client == nullptr || client->closed()) {
    sessions_.erase(client_id);
    return;
  }
  protocol::StringSink sink;
  sink.Append(bytes);
  protocol::BuildReadyForQuery(sink, 'I');
  const std::string& out = sink.bytes();
  if (!client->SendBytes(base::AsBytes(out))) {
    sessions_.erase(client_id);
    client->Close("write to admin client failed");
    return;
  }
  if (close_after) {
    sessions_.erase(client_id);
    client->Close("admin shutdown");
    return;
  }
  Session& session = sessions_[client_id];
  if (session.queued.empty()) {
    session.busy = false;
    return;
  }
  std::string next = std::move(session.queued.front());
  session.queued.pop_front();
  Run(client_id, client->user(), std::move(next));
}

void Console::Run(uint64_t client_id, const std::string& user, std::string sql) {
  auto command = ParseCommand(sql);
  if (!command.ok()) {
    Reply(client_id, ErrorBytes(kSyntaxError, base::Sv(command.status().message())));
    return;
  }
  if (command->verb == Verb::kEmpty) {
    protocol::StringSink sink;
    protocol::BuildEmptyQueryResponse(sink);
    Reply(client_id, sink.bytes());
    return;
  }
  const pool::ClientConn* client = registry_.FindClient(client_id);
  const bool local_admin = client != nullptr && client->local_console_admin();
  if (NeedsAdmin(command->verb) && !IsAdmin(user) && !local_admin) {
    Reply(client_id, ErrorBytes(kInsufficientPrivilege,
                                base::StrCat("admin access needed for ", CommandTag(command->verb),
                                             " (", user, " is a stats user)")));
    return;
  }
  PGFLEET_LOG(kInfo, "admin_command", "client=", client_id, " user=", base::LogQuote(user),
              " command=", base::LogQuote(sql));
  if (command->verb == Verb::kShow) {
    RunShow(client_id, *command);
  } else {
    RunAction(client_id, *command);
  }
}

void Console::RunShow(uint64_t client_id, const Command& command) {
  const auto fleet = options_.fleet_config();
  if (command.what == "version" || command.what == "config" || command.what == "help" ||
      command.what == "state") {
    protocol::StringSink sink;
    ResultSet table;
    if (command.what == "version") {
      ShowVersion(options_.version, &table);
      table.Write(sink, "SHOW");
    } else if (command.what == "state") {
      // Every worker applies PAUSE (console or SIGUSR1), so this worker's state is the pod's.
      ShowState(registry_.pause_state().all(), &table);
      table.Write(sink, "SHOW");
    } else if (command.what == "config") {
      ShowConfig(*fleet, &table);
      table.Write(sink, "SHOW");
    } else {
      std::string help =
          "Console usage\n\tSHOW HELP|POOLS|STATS|STATS_TOTALS|STATS_AVERAGES|"
          "TOTALS|CLIENTS|SERVERS|DATABASES|USERS|CONFIG|LISTS|MEM|VERSION|STATE|WORKERS|"
          "PEERS|FLEET\n\tPAUSE [<db>]\n\tRESUME [<db>]\n\tRECONNECT [<db>]\n\tKILL [<db>]"
          "\n\tKILL_CLIENT <id>\n\tDISABLE <db>\n\tENABLE <db>\n\tWAIT_CLOSE [<db>]"
          "\n\tRELOAD\n\tSHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS]";
      protocol::BuildNoticeResponse(sink, "NOTICE", "00000", help);
      protocol::BuildCommandComplete(sink, "SHOW");
    }
    Reply(client_id, sink.bytes());
    return;
  }
  peering::v1::GetWorkerStatsRequest request;
  request.set_include_connections(command.what == "clients" || command.what == "servers");
  const std::string what = command.what;
  fanout_.GatherStats(
      request, kGatherDeadline, [this, client_id, what, fleet](PodFanout::StatsAnswers answers) {
        ShowInput in;
        in.fleet = fleet.get();
        in.version = options_.version;
        in.own_peer_id = options_.own_peer_id;
        protocol::StringSink sink;
        for (auto& a : answers) {
          if (a.ok) {
            in.workers.push_back(std::move(a.reply));
          } else {
            in.failed.emplace_back(a.peer_id, a.error);
            protocol::BuildNoticeResponse(
                sink, "WARNING", kConnectionFailure,
                base::StrCat("worker peer_id=", a.peer_id, " did not answer: ", a.error));
          }
        }
        ResultSet table;
        if (what == "pools") ShowPools(in, &table);
        if (what == "stats") ShowStats(in, &table);
        if (what == "stats_totals") ShowStatsTotals(in, &table);
        if (what == "totals") ShowTotals(in, &table);
        if (what == "stats_averages") ShowStatsAverages(in, &table);
        if (what == "clients") ShowClients(in, &table);
        if (what == "servers") ShowServers(in, &table);
        if (what == "databases") ShowDatabases(in, &table);
        if (what == "users") ShowUsers(in, &table);
        if (what == "lists") ShowLists(in, &table);
        if (what == "mem") ShowMem(in, &table);
        if (what == "workers") ShowWorkers(in, &table);
        if (what == "peers") ShowPeers(in, &table);
        if (what == "fleet") ShowFleet(in, &table);
        table.Write(sink, "SHOW");
        Reply(client_id, sink.bytes());
      });
}

void Console::RunAction(uint64_t client_id, const Command& command) {
  const std::string tag(CommandTag(command.verb));
  if (command.verb == Verb::kSuspend) {
    Reply(client_id,
          ErrorBytes(protocol::sqlstate::kFeatureNotSupported,
                     "SUSPEND is not supported: pgfleet restarts its workers one by one instead "
                     "(SIGRTMIN, or a Kubernetes rolling update), with no online hand-over"));
    return;
  }
  if (command.verb == Verb::kShutdown && command.shutdown != ShutdownMode::kNow) {
    RunWaitingShutdown(client_id, command.shutdown);
    return;
  }
  if (command.verb == Verb::kShutdown) {
    PGFLEET_LOG(kInfo, "admin_shutdown", "client=", client_id);
    protocol::StringSink sink;
    protocol::BuildCommandComplete(sink, tag);
    Reply(client_id, sink.bytes(), /*close_after=*/true);
    if (options_.shutdown) options_.shutdown();
    return;
  }
  if (!command.database.empty() && !options_.fleet_config()->FindDatabase(command.database)) {
    Reply(client_id,
          ErrorBytes(kInvalidCatalogName, base::StrCat("no such database: ", command.database)));
    return;
  }
  AdminCommandRequest request;
  request.set_command(ToProto(command.verb));
  request.set_database(command.database);
  request.set_client_id(command.client_id);
  request.set_setting(command.setting);
  request.set_value(command.value);
  const bool waits = command.verb == Verb::kPause || command.verb == Verb::kWaitClose;
  Broadcast(client_id, tag, request, waits ? kWaitingCommandDeadline : kQuickCommandDeadline,
            nullptr);
}

void Console::RunWaitingShutdown(uint64_t client_id, ShutdownMode mode) {
  // WAIT_FOR_SERVERS: PAUSE everywhere (no new server work, answered once every server is
  // released), then the pod's shutdown. WAIT_FOR_CLIENTS: every worker stops taking clients and
  // answers once its last client left, then the pod's shutdown (which then has nothing to wait
  // for). The console's own session is answered then.
  const bool servers = mode == ShutdownMode::kWaitForServers;
  PGFLEET_LOG(kInfo, "admin_shutdown", "client=", client_id,
              " wait_for=", servers ? "servers" : "clients");
  AdminCommandRequest request;
  request.set_command(servers ? AdminCommandRequest::COMMAND_PAUSE
                              : AdminCommandRequest::COMMAND_WAIT_FOR_CLIENTS);
  Broadcast(client_id, "SHUTDOWN", request, kWaitingCommandDeadline, [this] {
    if (options_.shutdown) options_.shutdown();
  });
}

void Console::Broadcast(uint64_t client_id, const std::string& tag,
                        const AdminCommandRequest& request, absl::Duration deadline,
                        std::function<void()> after) {
  fanout_.Broadcast(
      request, deadline, [this, client_id, tag, after](PodFanout::CommandAnswers answers) {
        std::string errors;
        std::set<std::string> distinct;
        size_t failed = 0;
        for (const auto& a : answers) {
          std::string error = a.ok ? a.reply.error() : a.error;
          if (a.ok && a.reply.ok()) continue;
          ++failed;
          distinct.insert(error);
          base::StrAppend(&errors, errors.empty() ? "" : "; ", "worker peer_id=", a.peer_id, ": ",
                          error);
        }
        protocol::StringSink sink;
        if (errors.empty()) {
          protocol::BuildCommandComplete(sink, tag);
        } else if (failed == answers.size() && distinct.size() == 1) {
          // Every worker refused it alike (a bad SET): the reason, once.
          protocol::BuildErrorResponse(sink, "ERROR", kInvalidParameterValue,
                                       base::StrCat(tag, " failed: ", *distinct.begin()));
        } else {
          protocol::BuildErrorResponse(sink, "ERROR", kConnectionFailure,
                                       base::StrCat(tag, " failed on some workers: ", errors));
        }
        Reply(client_id, sink.bytes(),
              /*close_after=*/after != nullptr && errors.empty());
        if (after != nullptr && errors.empty()) after();
      });
}

}  // namespace pgfleet::admin
