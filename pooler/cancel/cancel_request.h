// One outbound CancelRequest to PostgreSQL on behalf of a client whose query is running. It is
// sent only if the server is still running a query for the same link when the socket connects,
// so a late cancel never hits the next transaction (docs/architecture.md, "Cancel keys").
#pragma once

#include <cstdint>
#include <vector>

#include "pooler/net/connection.h"

namespace pgfleet::pool {

class CancelRequestConn;
class ServerConn;
struct WorkerCounters;

// What a request needs from the handler that tracks it (CancelHandler implements it).
class CancelRequestOwner {
 public:
  // The server the cancel was for; null once it is gone.
  virtual ServerConn* FindServer(uint64_t id) const = 0;
  virtual WorkerCounters& counters() = 0;
  // The request is over: the owner deletes it.
  virtual void Forget(CancelRequestConn* request) = 0;
  // The connection to PostgreSQL failed before the request went out: the owner may try again,
  // keeping the server's hold (ServerConn::AddCancelInFlight). False: give up.
  virtual bool RetryCancel(const CancelRequestConn& failed) = 0;

 protected:
  ~CancelRequestOwner() = default;
};

class CancelRequestConn final : public net::Connection {
 public:
  // `attempt` counts from 1; `first_started_at` is the first attempt's start (retries keep it).
  CancelRequestConn(net::EventLoop& loop, int fd, CancelRequestOwner* handler, uint64_t server_id,
                    uint64_t link_generation, int attempt = 1,
                    absl::Time first_started_at = absl::InfinitePast());
  // A cancel for a backend pgfleet is abandoning (query_timeout): sent without checks, because the
  // server connection is closed right after and must not keep running the query.
  CancelRequestConn(net::EventLoop& loop, int fd, CancelRequestOwner* handler, uint32_t backend_pid,
                    std::vector<uint8_t> backend_secret);
  void OnIoEvent(uint32_t events) override;
  // Ends the request (sent, refused or timed out) and releases the server's cancel hold.
  // `release_hold` false: a retry (CancelRequestOwner::RetryCancel) carries the hold on.
  void Finish(std::string_view outcome, bool release_hold = true);
  absl::Time started_at() const { return started_at_; }
  absl::Time first_started_at() const { return first_started_at_; }
  uint64_t server_id() const { return server_id_; }
  uint64_t link_generation() const { return link_generation_; }
  int attempt() const { return attempt_; }

 private:
  CancelRequestOwner* handler_;
  uint64_t server_id_;
  uint64_t link_generation_;
  bool sent_ = false;
  bool unconditional_ = false;
  uint32_t backend_pid_ = 0;
  std::vector<uint8_t> backend_secret_;
  absl::Time started_at_;
  absl::Time first_started_at_;
  int attempt_ = 1;
};

}  // namespace pgfleet::pool
