// What a client has made of its session in transaction pooling, beyond its transactions: the
// settings it SET (carried to each server it gets) and the state that cannot move to another
// server (temporary tables, SQL prepared statements, session advisory locks, cursors WITH HOLD,
// LISTEN), which pins its server to it until released (docs/architecture.md, "Session state in
// transaction pooling"). Pure bookkeeping over the statement classifier's effects.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "pooler/protocol/startup_options.h"
#include "pooler/relay/param_sync.h"
#include "pooler/sql/session_effects.h"

namespace pgfleet::pool {

enum class PinReason : uint8_t {
  kTempTable,
  kPreparedStatement,
  kAdvisoryLock,
  kHoldCursor,
  kListen
};
inline constexpr int kPinReasonCount = 5;
std::string_view PinReasonName(PinReason reason);

// A setting as a server has it from a client: the statement that set it and the one that
// undoes it.
struct SessionSetting {
  std::string apply_sql;
  std::string reset_sql;
  bool operator==(const SessionSetting&) const = default;
};
// By name; ordered, so a client's settings are replayed in one stable order.
using SessionSettings = std::map<std::string, SessionSetting, std::less<>>;

class ClientSession {
 public:
  // A committed effect (its statement succeeded, its transaction committed).
  void Apply(const sql::Effect& effect);
  // A setting the client gave in its startup packet (a kSet effect): carried as a SET is, and
  // what RESET, RESET ALL and DISCARD ALL return to, as PostgreSQL takes startup values for the
  // session's defaults.
  void SetStartup(const sql::Effect& effect);

  const SessionSettings& settings() const { return settings_; }
  bool pinned() const { return pin_mask() != 0; }
  // One bit per PinReason.
  uint32_t pin_mask() const;
  // "temp_table,advisory_lock", or "" when not pinned (SHOW CLIENTS).
  std::string DescribePins() const;
  // Counted in max_pinned_servers: the client kept its server past the end of a transaction.
  // A pin made and released inside one transaction never counts (the transaction holds the
  // server anyway: psycopg2 applications PREPARE and DEALLOCATE that way).
  bool pin_counted = false;

  // The client's server LISTENs on `channel` for it (a LISTEN that went through the relay, which
  // pins): the LISTEN hub leaves that channel's notifications to the server.
  bool ListensOnServer(std::string_view channel) const {
    return channels_.contains(std::string(channel));
  }
  // UNLISTENs (and DISCARD ALLs) that reached a server through the relay, committed, in order:
  // the channel, or "" for all. The pool hands them to its LISTEN hub (listen_hub.h) at the
  // transaction's end and clears this, so the hub stops delivering what the client unlistened
  // wherever it did.
  std::vector<std::string> unlistened;

  // Whether `effects` could pin a session that holds nothing yet.
  static bool AnyPins(const sql::Effects& effects);

 private:
  SessionSettings settings_;
  SessionSettings startup_;  // SetStartup's, by name
  absl::flat_hash_set<std::string> temp_objects_;
  absl::flat_hash_set<std::string> prepared_;
  absl::flat_hash_set<std::string> hold_cursors_;
  absl::flat_hash_set<std::string> channels_;
  // Session advisory locks taken minus released. A lock taken twice is released twice, as
  // PostgreSQL counts. A pg_try_advisory_lock whose only column came back false took nothing
  // (the relay reads that DataRow); one in a larger result counts as taken: the pin may outlast
  // the lock until pg_advisory_unlock_all or the client leaves, the safe side.
  int advisory_locks_ = 0;
};

// Appends to `sql` what makes a server whose client-made settings are `applied` carry `wanted`:
// the RESET of each setting `wanted` lacks, then the statement of each one it has that differs.
// Returns true when anything was appended.
bool BuildSessionSync(const SessionSettings& wanted, const SessionSettings& applied,
                      std::string* sql);

// A tracked parameter that servers do not report (search_path before PostgreSQL 18) cannot be
// followed through ParameterStatus: a neighbour's SET of it, or its RESET, would change it unseen
// on a server that pgfleet believes holds this client's value. So the value a client gave for
// one in its startup packet (pgjdbc's currentSchema, asyncpg's server_settings) leaves `params`
// and becomes a startup setting of its `session` (SetStartup): carried to each server with the
// SETs, undone for the next client with them. `server_defaults` is what the pool's servers
// report at login; a slot unset there is one they do not report.
// The settings a client's startup packet gave (`options` -c switches, parameters that name a
// setting) become startup settings of its `session` (SetStartup).
void TakeStartupSettings(std::span<const protocol::StartupSetting> settings,
                         ClientSession* session);

void CarryUnreportedStartupParams(const TrackedParamNames& names, const ParamSet& server_defaults,
                                  ParamSet* params, ClientSession* session);

}  // namespace pgfleet::pool
