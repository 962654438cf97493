// Small RAII helpers over libpq for integration tests.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>

namespace pgfleet::testing {

struct PGconnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PGresultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ConnPtr = std::unique_ptr<PGconn, PGconnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, PGresultDeleter>;

inline ConnPtr Connect(const std::string& conninfo) {
  return ConnPtr(PQconnectdb(conninfo.c_str()));
}
inline bool Ok(const ConnPtr& c) { return c && PQstatus(c.get()) == CONNECTION_OK; }
inline std::string ErrorOf(const ConnPtr& c) { return c ? PQerrorMessage(c.get()) : "null"; }

inline ResultPtr Exec(const ConnPtr& c, const std::string& sql) {
  return ResultPtr(PQexec(c.get(), sql.c_str()));
}
inline bool ResultOk(const ResultPtr& r) {
  auto s = PQresultStatus(r.get());
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}
// The first value of a query's result, or "<error: ...>".
inline std::string Value(const ConnPtr& c, const std::string& sql) {
  ResultPtr r = Exec(c, sql);
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK || PQntuples(r.get()) < 1) {
    return std::string("<error: ") + PQerrorMessage(c.get()) + ">";
  }
  return PQgetvalue(r.get(), 0, 0);
}
inline std::string SqlState(const ResultPtr& r) {
  const char* s = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
  return s ? s : "";
}

}  // namespace pgfleet::testing
