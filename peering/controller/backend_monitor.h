// pgfleet-controller's one connection to PostgreSQL (controller.monitor): it asks which backends
// of lost pods PostgreSQL still lists, so that their room is given to others only once they are
// gone (docs/architecture.md, "Connection budget"), and, where the operator asks for it, ends
// them with pg_terminate_backend.
//
// libpq blocks, and the controller's loop must not: the questions run on a thread of their own,
// one at a time, and each answer is handed to a callback on that thread (the service posts it to
// its loop). The connection is opened on the first question and again after it breaks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct pg_conn;  // libpq's PGconn

namespace pgfleet::peering::controller {

class BackendMonitor {
 public:
  // A backend a lost member reported, and how long ago the controller last heard from that
  // member: a backend that started later is not the member's (PostgreSQL reused the pid).
  struct Backend {
    uint32_t pid = 0;
    absl::Duration silent;
  };
  struct Answer {
    std::vector<uint32_t> asked;
    absl::StatusOr<std::set<uint32_t>> listed;  // of `asked`, the ones PostgreSQL lists now
    int terminated = 0;                         // signalled by this question (terminate)
  };

  // `conninfo` is a libpq connection string; connect_timeout (5 s) and statement_timeout (5 s)
  // apply unless it sets them.
  BackendMonitor(std::string conninfo, std::function<void(Answer)> on_answer);
  ~BackendMonitor();
  BackendMonitor(const BackendMonitor&) = delete;
  BackendMonitor& operator=(const BackendMonitor&) = delete;

  // Sends a question; false (nothing sent) while the previous one is still out. With
  // `terminate`, the listed backends are first asked to end (pg_terminate_backend).
  bool Ask(std::vector<Backend> backends, bool terminate);

 private:
  struct Question {
    std::vector<Backend> backends;
    bool terminate = false;
  };
  void Run();
  Answer Respond(const Question& question);
  void Disconnect();

  const std::string conninfo_;
  const std::function<void(Answer)> on_answer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Question> question_;  // guarded by mu_
  bool busy_ = false;                 // guarded by mu_: a question is out
  bool stop_ = false;                 // guarded by mu_
  pg_conn* conn_ = nullptr;           // monitor thread only
  std::thread thread_;
};

}  // namespace pgfleet::peering::controller
