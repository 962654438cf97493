// The controller's monitoring connection: which lost backends PostgreSQL still lists.
#include "peering/controller/backend_monitor.h"

#include <libpq-fe.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pgfleet::peering::controller {
namespace {

// The reported pids with the member's silence in milliseconds. A backend that started after the
// member went silent (less one second for the two clocks' reading of "now") is another's, under
// a reused pid: never counted as the member's, and never terminated.
constexpr char kMatch[] =
    "FROM pg_stat_activity a JOIN unnest($1::int[], $2::bigint[]) AS q(pid, silent_ms) "
    "ON a.pid = q.pid WHERE a.backend_start <= now() - (q.silent_ms - 1000) * interval '1 ms'";

std::string ArrayOf(const std::vector<BackendMonitor::Backend>& backends, bool silence) {
  return absl::StrCat("{",
                      absl::StrJoin(backends, ",",
                                    [silence](std::string* out, const BackendMonitor::Backend& b) {
                                      absl::StrAppend(out, silence
                                                               ? absl::ToInt64Milliseconds(b.silent)
                                                               : static_cast<int64_t>(b.pid));
                                    }),
                      "}");
}

}  // namespace

BackendMonitor::BackendMonitor(std::string conninfo, std::function<void(Answer)> on_answer)
    : conninfo_(std::move(conninfo)), on_answer_(std::move(on_answer)) {
  thread_ = std::thread([this] { Run(); });
}

BackendMonitor::~BackendMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Disconnect();
}

bool BackendMonitor::Ask(std::vector<Backend> backends, bool terminate) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ || stop_) return false;
    busy_ = true;
    question_ = Question{std::move(backends), terminate};
  }
  cv_.notify_all();
  return true;
}

void BackendMonitor::Run() {
  while (true) {
    Question question;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || question_.has_value(); });
      if (stop_) return;
      question = std::move(*question_);
      question_.reset();
    }
    Answer answer = Respond(question);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    on_answer_(std::move(answer));
  }
}

void BackendMonitor::Disconnect() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
}

BackendMonitor::Answer BackendMonitor::Respond(const Question& question) {
  Answer answer;
  for (const Backend& b : question.backends) answer.asked.push_back(b.pid);
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    Disconnect();
    // The defaults come first, so that the connection string's own settings win.
    const char* keywords[] = {"connect_timeout", "options", "application_name", "dbname", nullptr};
    const char* values[] = {"5", "-c statement_timeout=5000", "pgfleet-controller",
                            conninfo_.c_str(), nullptr};
    conn_ = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
    if (PQstatus(conn_) != CONNECTION_OK) {
      answer.listed = absl::UnavailableError(
          absl::StrCat("controller.monitor: cannot connect: ", PQerrorMessage(conn_)));
      Disconnect();
      return answer;
    }
  }
  const std::string pids = ArrayOf(question.backends, false);
  const std::string silences = ArrayOf(question.backends, true);
  const char* params[] = {pids.c_str(), silences.c_str()};
  auto run = [&](const std::string& sql) {
    return PQexecParams(conn_, sql.c_str(), 2, nullptr, params, nullptr, nullptr, 0);
  };
  if (question.terminate) {
    PGresult* result = run(absl::StrCat("SELECT pg_terminate_backend(a.pid) ", kMatch));
    if (PQresultStatus(result) == PGRES_TUPLES_OK) {
      for (int row = 0; row < PQntuples(result); ++row) {
        if (std::string_view(PQgetvalue(result, row, 0)) == "t") ++answer.terminated;
      }
    } else {
      answer.listed = absl::PermissionDeniedError(absl::StrCat(
          "controller.monitor: pg_terminate_backend failed (the role needs pg_signal_backend): ",
          PQresultErrorMessage(result)));
      PQclear(result);
      return answer;
    }
    PQclear(result);
  }
  PGresult* result = run(absl::StrCat("SELECT a.pid ", kMatch));
  if (PQresultStatus(result) != PGRES_TUPLES_OK) {
    answer.listed = absl::UnavailableError(
        absl::StrCat("controller.monitor: pg_stat_activity: ", PQresultErrorMessage(result)));
    PQclear(result);
    if (PQstatus(conn_) != CONNECTION_OK) Disconnect();
    return answer;
  }
  std::set<uint32_t> listed;
  for (int row = 0; row < PQntuples(result); ++row) {
    listed.insert(static_cast<uint32_t>(std::stoul(PQgetvalue(result, row, 0))));
  }
  PQclear(result);
  answer.listed = std::move(listed);
  return answer;
}

}  // namespace pgfleet::peering::controller
