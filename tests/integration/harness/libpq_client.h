// Small RAII helpers over libpq for integration tests.
#pragma once

#include <libpq-fe.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

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

// One row of a result as column -> value.
using Row = std::map<std::string, std::string>;
// Every row of `r` (none unless it is a tuples result).
inline std::vector<Row> RowsOf(const ResultPtr& r) {
  std::vector<Row> rows;
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) return rows;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    Row row;
    for (int j = 0; j < PQnfields(r.get()); ++j)
      row[PQfname(r.get(), j)] = PQgetvalue(r.get(), i, j);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace pgfleet::testing
