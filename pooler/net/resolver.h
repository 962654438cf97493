// Host names of PostgreSQL servers resolved off the event loop, and kept for dns_max_ttl
// (PgBouncer's meaning: the answer's own DNS TTL is ignored), failures for dns_nxdomain_ttl. A
// worker connects to a numeric address or a unix socket at once; a name's first connect (and the
// first after its answer expired) waits for one lookup on the resolver's thread, shared by every
// connect to that name meanwhile, instead of blocking the loop in getaddrinfo at every connect.
// When a refreshed answer differs from the previous one, the owner is told, so that servers of
// the old address retire (a failover by DNS).
#pragma once

#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::net {

// Where a connect goes: an IPv4, IPv6 or unix socket address.
struct ResolvedAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  bool operator==(const ResolvedAddress& other) const;
};

// Resolves now (blocking for a name): a unix socket directory (a host starting with '/') gives its
// .s.PGSQL.`port`. ResolveNow is the first address, ResolveAll every one, in getaddrinfo's order.
absl::StatusOr<ResolvedAddress> ResolveNow(const std::string& host, int port);
absl::StatusOr<std::vector<ResolvedAddress>> ResolveAll(const std::string& host, int port);

class Resolver {
 public:
  // How a name is looked up (on the resolver's thread): ResolveAll, or a test's stand-in.
  using Addresses = std::vector<ResolvedAddress>;
  using Lookup = std::function<absl::StatusOr<Addresses>(const std::string& host, int port)>;
  explicit Resolver(EventLoop& loop, Lookup lookup = ResolveAll);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  struct Ttls {
    absl::Duration answer = absl::Seconds(15);   // dns_max_ttl
    absl::Duration failure = absl::Seconds(15);  // dns_nxdomain_ttl
  };
  // `on_answer`: a lookup ended (connects that waited for it may go on). `on_change(host, port)`:
  // a name's refreshed answer differs from the one before.
  void set_callbacks(std::function<void()> on_answer,
                     std::function<void(const std::string& host, int port)> on_change);

  enum class State { kReady, kPending, kFailed };
  struct Answer {
    State state = State::kPending;
    ResolvedAddress address;  // kReady
    std::string error;        // kFailed
  };
  // A numeric address or a unix socket at once; a name from its cached answer while that is
  // younger than its ttl, else kPending with one lookup started. A name with several addresses
  // gives them in turn (PgBouncer: "used in a round-robin manner").
  Answer Resolve(const std::string& host, int port, const Ttls& ttls);

  // Lookups done on the thread (for tests and SHOW DNS-like diagnostics).
  uint64_t lookups() const { return lookups_; }

 private:
  struct Entry {
    bool in_flight = false;
    bool answered = false;
    absl::Time answered_at;
    absl::StatusOr<Addresses> result = absl::UnavailableError("not resolved yet");
    size_t next = 0;  // the address the next connect gets
  };
  void Run();
  void OnResult(const std::string& host, int port, absl::StatusOr<Addresses> result);

  EventLoop& loop_;
  const Lookup lookup_;
  std::function<void()> on_answer_;
  std::function<void(const std::string&, int)> on_change_;
  std::map<std::pair<std::string, int>, Entry> cache_;
  uint64_t lookups_ = 0;
  // Results posted to the loop after this is gone are dropped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<std::string, int>> queue_;  // guarded by mu_
  bool stopping_ = false;                          // guarded by mu_
  std::thread thread_;                             // started on the first lookup
};

}  // namespace pgfleet::net
