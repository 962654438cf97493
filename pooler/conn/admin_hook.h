// The seam between client connections and the admin console (the virtual database "pgfleet"):
// the pool layer authenticates the client as usual, then hands its simple-protocol queries to
// whatever implements this (pooler/admin). Keeps pool/ free of any SHOW logic.
#pragma once

#include <string>
#include <string_view>

namespace pgfleet::pool {

class ClientConn;

inline constexpr std::string_view kAdminDatabase = "pgfleet";
// PgBouncer's name for its console, which pgbouncer_exporter and runbooks connect to: the console
// too, unless the config has a database of that name.
inline constexpr std::string_view kPgBouncerAdminDatabase = "pgbouncer";

class AdminConsoleHandler {
 public:
  virtual ~AdminConsoleHandler() = default;
  // Whether `user` may use the console at all (admin_users or stats_users).
  virtual bool MayConnect(const std::string& user) const = 0;
  // Runs one Query message's SQL for `client` (state kAdmin). The handler writes the whole
  // answer (RowDescription/DataRow/CommandComplete or ErrorResponse, then ReadyForQuery) with
  // client.SendBytes(), now or later from the loop thread; it must check client liveness through
  // the id it captured (PoolRegistry::FindClient) if it answers later.
  virtual void HandleQuery(ClientConn& client, std::string_view sql) = 0;
};

}  // namespace pgfleet::pool
