// Parsing of admin console commands (PgBouncer's grammar): SHOW <what>, PAUSE [db], RESUME [db],
// RECONNECT [db], KILL [db], KILL_CLIENT id, DISABLE db, ENABLE db, SUSPEND, SET key = value,
// RELOAD, SHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS], WAIT_CLOSE [db]. Pure, for unit tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pgfleet::admin {

enum class Verb {
  kEmpty,  // only whitespace and semicolons: EmptyQueryResponse
  kShow,
  kPause,
  kResume,
  kReconnect,
  kKill,
  kReload,
  kShutdown,
  kWaitClose,
  kKillClient,
  kDisable,
  kEnable,
  kSuspend,
  kSet,
};

// SHUTDOWN's mode.
enum class ShutdownMode { kNow, kWaitForServers, kWaitForClients };

struct Command {
  Verb verb = Verb::kEmpty;
  std::string what;        // SHOW's subject, lower case ("pools", "stats_totals", ...)
  std::string database;    // the optional/required database argument, unquoted; empty = all
  uint64_t client_id = 0;  // KILL_CLIENT's
  // SET key = value: PgBouncer's key name, lower case, and the value without its quotes.
  std::string setting;
  std::string value;
  ShutdownMode shutdown = ShutdownMode::kNow;
};

// The SHOW subjects the console answers, in the order SHOW HELP lists them.
inline constexpr std::string_view kShowSubjects[] = {
    "pools",     "stats", "stats_totals", "stats_averages", "clients", "servers",
    "databases", "users", "config",       "lists",          "mem",     "version",
    "workers",   "peers", "fleet",        "help",           "state",   "totals"};

// Parses one statement. Errors are InvalidArgument with PgBouncer's wording ("invalid command
// 'FOO', use SHOW HELP;").
absl::StatusOr<Command> ParseCommand(std::string_view sql);

// True for commands that change state (admin users only; stats users may only SHOW).
bool NeedsAdmin(Verb verb);
// The CommandComplete tag ("SHOW", "PAUSE", ...).
std::string_view CommandTag(Verb verb);

}  // namespace pgfleet::admin
